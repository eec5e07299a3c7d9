"""A framework of numpy only, for tests/test_registry.py: its kit is this package, its one registry entry below.

It trains a linear softmax classifier whatever model the spec names (it is a stand-in, not a
framework), implements the Backend protocol (kits/training_loop/backend.py) and nothing else: no
certificate side, probe or bare loop, which its entry says (``parts``). Registered for a process
and every kit process it starts by REPROKIT_EXTRA_FRAMEWORKS=tests.stub_kit:FRAMEWORK.
"""
from kits.contract.names import Framework

FRAMEWORK = Framework("stub", "Stub", "tests.stub_kit", "#009E73", parts=("backend",))
# The same stub under a second name, for a ratio of two frameworks that do the same work (tests/test_sequential.py).
TWIN = Framework("stub2", "Stub twin", "tests.stub_kit", "#56B4E9", parts=("backend",))

"""A framework of numpy only, as a plugin: its kit is this package, its registry entries below, registered through
the ``reprokit.frameworks`` entry-point group (pyproject.toml beside it) and nothing else.

It trains a linear softmax classifier whatever model the spec names (it is a stand-in, not a framework), implements
the Backend protocol (reprokit/kits/training_loop/backend.py) and nothing else: no certificate side, probe or bare loop,
which its entry says (``parts``). `nox -s tests` installs it into a folder of the tests' environment that is not on
its path (tests/plugin_site.py): a test puts that folder on PYTHONPATH where it wants the stub registered, so the
rest of the suite sees the built-in frameworks alone.
"""
from reprokit.kits.contract.names import Framework

FRAMEWORK = Framework("stub", "Stub", "reprokit_stub_kit", "#009E73", parts=("backend",))
# The same stub under a second name, for a ratio of two frameworks that do the same work (tests/test_sequential.py).
TWIN = Framework("stub2", "Stub twin", "reprokit_stub_kit", "#56B4E9", parts=("backend",))

"""Attaches the probe to a new Python process of a user's script (a launcher's rank, a spawned worker).

The probe puts this folder first on PYTHONPATH for the script's processes (reprokit/kits/ranks/follow.py), so every
Python process they start imports it at start-up, before its own first line. Outside a probed run it does nothing. It
imports the kit only where the run's session is set: a process that is not the script's (a compiler, a tool the
script runs) costs a lookup of one environment variable. A ``sitecustomize`` of the environment's own, further
down the path, still runs after it: this one must not shadow it.
"""
import os
import sys

if os.environ.get("REPROKIT_PROBE_SESSION"):
    from reprokit.kits.ranks import process

    process.attach()

_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    _theirs = os.path.join(_entry or ".", "sitecustomize.py")
    if os.path.abspath(_entry or ".") != _here and os.path.isfile(_theirs):
        with open(_theirs) as _file:
            exec(compile(_file.read(), _theirs, "exec"), {"__name__": "sitecustomize", "__file__": _theirs})
        break

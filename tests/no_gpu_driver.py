"""Runs small scripts in one framework's real environment with the probe's no-GPU guards installed, as a CPU run has them.

    PYTHONPATH=REPO KIT_PYTHON tests/no_gpu_driver.py FRAMEWORK SCRIPT_DIR SCRIPT...

Run by tests/test_devices.py. The guards (reprokit/kits/devices/no_gpu.py) are installed once, after the framework is
imported (as the probe installs them, after its hooks); each script then runs in turn from SCRIPT_DIR, as the probe
runs a script. Prints one JSON line: the declaration, and per script the refusal's sentence, or "ran" where it
ran to its end, or the error it raised otherwise.
"""
from __future__ import annotations

import importlib
import json
import runpy
import sys
from pathlib import Path

from reprokit.kits.devices import no_gpu

framework, script_dir, scripts = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
importlib.import_module({"pytorch": "torch", "tensorflow": "tensorflow", "jax": "jax"}[framework])
declared = no_gpu.install(framework, script_dir)
outcome = {}
for name in scripts:
    try:
        runpy.run_path(str(script_dir / name), run_name="__main__")
        outcome[name] = "ran"
    except no_gpu.NoGpuOnThisRun as exc:
        outcome[name] = str(exc)
    except Exception as exc:  # noqa: BLE001 - any other error is the test's finding
        outcome[name] = f"raised {type(exc).__name__}: {exc}"
print(json.dumps({"declared": declared, "outcome": outcome}))

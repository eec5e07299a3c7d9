"""Runs a spec's launcher as the probe runs it (reprokit/kits/launchers/run.py), without the rest of the probe.

    PYTHONPATH=REPO KIT_PYTHON tests/launcher_driver.py SPEC_JSON WORK_FOLDER SHIMS_JSON

Run by tests/test_launchers.py in PyTorch's real environment, from a work folder that already holds the script's
data (no probe serves it here): the launcher starts the script's ranks, and returns once they ended (it raises,
and this exits non-zero, where one failed). Writes what was declared to SHIMS_JSON.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from reprokit.kits.contract.spec import ScriptSpec
from reprokit.kits.launchers import run as launcher

spec_json, work, shims_json = map(Path, sys.argv[1:4])      # read first: the launcher sets sys.argv as its own
spec = ScriptSpec.from_dict(json.loads(spec_json.read_text()))
os.chdir(work)
shims: list[str] = []
launcher.run(spec, shims)
shims_json.write_text(json.dumps(shims))

"""The fault suite as CI runs it: every fault of `nox -s faults` is proved once in CI, either by the test that
PROVED_IN_CI names (the same injection from outside, on a real run) or here, by the fast subset
(`nox -s faults -- --fast`): each fault injected from outside into a real quick matrix, judged by its own
independent listing, survived with no result lost."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest
from checkout import REPO

from faults.run import FAULTS, PROVED_IN_CI

pytestmark = pytest.mark.alone


def test_every_fault_is_proved_in_ci_by_a_test_that_exists():
    assert set(PROVED_IN_CI) < set(FAULTS)
    for fault, test in PROVED_IN_CI.items():
        path, name = test.split("::")
        tree = ast.parse((REPO / path).read_text())
        tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert name in tests, f"{fault!r}: {test} does not exist"


@pytest.mark.slow
def test_the_fast_fault_suite_survives_every_fault_and_loses_no_result(kit_python):
    kit_python("pytorch")
    proc = subprocess.run([sys.executable, "faults/run.py", "--fast"], cwd=REPO, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})
    print(proc.stdout)                 # the table, in the test's output
    last = proc.stdout.strip().splitlines()[-1]
    m = re.match(r"faults survived: (\d+) of (\d+), results lost: (\d+)", last)
    assert m and proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    survived, made, lost = map(int, m.groups())
    assert survived == made == len(FAULTS) - len(PROVED_IN_CI) and lost == 0, last
    assert "Traceback" not in proc.stdout + proc.stderr

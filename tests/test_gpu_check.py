"""scripts/gpu_check plans what it means to run, and prints that plan, with its estimate, on a CPU too.

Its plan on a GPU is the CLI's own matrix for the command it runs there: the same runs, one repeat of the
named variants and of each pitfall a claim names. The GPU host is a stand-in nvidia-smi (tests/gpu_host.py).
"""
from __future__ import annotations

import re
import subprocess
import sys
from types import SimpleNamespace

from checkout import REPO

from reprokit import cli
from reprokit.execute import compose
from reprokit.gpu_check.plan import MAX_STEPS, TARGET_S, TWIN, reproduce_command

SCRIPT = REPO / "scripts" / "gpu_check"


def test_the_plan_printed_without_a_gpu_is_the_matrix_a_gpu_runs(stand_in_gpu_host, tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--plan-only", "--state-dir", str(tmp_path / "state")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    head = next(line for line in proc.stdout.splitlines() if line.startswith("== the plan on a GPU"))
    runs, minutes, seconds = map(int, re.search(r"(\d+) runs, .* estimated (\d+)m(\d+)s", head).groups())
    assert "NVIDIA H200" in head and "1 repeat" in head and minutes * 60 + seconds <= TARGET_S, head
    printed = [tuple(line.split()[1:4]) for line in proc.stdout.splitlines() if re.match(r"\s+\d+\. \w", line)]
    assert runs == len(printed) == 7

    # The same command, planned by the CLI on a GPU host: the same runs (and the twin besides them).
    stand_in_gpu_host("580.95.05")
    args = SimpleNamespace(python=sys.executable, name="gpu-check", timeout=150.0, state_dir=tmp_path / "state",
                           reports_dir=tmp_path / "reports")
    command = reproduce_command(args, [], on_gpu=True)
    m = compose.build(cli.parse([*command[1:], "--dry-run"]))
    specs = [s.to_dict() for s in m.specs]
    planned = [(s["experiment"], s["framework"], s["variant"]) for s in specs]
    assert printed[:-1] == planned and printed[-1] == (TWIN, "pytorch", "fixed,")
    assert {s["repeat"] for s in specs} == {0} and m.profile == "standard" and m.device == "gpu"
    assert max(s["train"]["max_steps_per_epoch"] for s in specs) == MAX_STEPS
    assert {"fixed", "as_posted"} <= {s["variant"] for s in specs}

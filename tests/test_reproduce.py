"""The whole path, for real: experiment -> plan -> local runner -> result files -> report."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import REPO

from reprokit.results import results

pytestmark = pytest.mark.slow


def _cmd(tiny_dir: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(tiny_dir), "--only", "tiny",
            "--backend", "local", "--variants", "fixed", "--state-dir", str(tmp_path / "state"),
            "--reports-dir", str(tmp_path / "reports"),
            "--data-dir", str(tmp_path / "data"), "--name", "t", *extra]


def _reproduce(tiny_dir, tmp_path, *extra, timeout=900):
    return subprocess.run(_cmd(tiny_dir, tmp_path, *extra), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_a_timeout_is_recorded_then_reproduce_writes_results_and_report_and_resumes(kit_python, tiny_dir, tmp_path):
    """One state folder through a matrix's life: timed out, tried again, run to the end, resumed, run fresh."""
    kit_python("pytorch"), kit_python("tensorflow")      # envs built outside the timed command
    timed = _reproduce(tiny_dir, tmp_path, "--timeout", "2", "--no-certify")
    assert timed.returncode == 1, timed.stdout + timed.stderr
    assert timed.stdout.count("FAILED (timeout: the run exceeded its 2 s limit)") == 2     # the matrix goes on
    report_dir = tmp_path / "reports" / "t"
    text = (report_dir / "report.md").read_text()
    assert "## Failed runs" in text and "**timeout**" in text
    stored = [json.loads(p.read_text()) for p in (tmp_path / "state" / "results").glob("*.json")]
    assert {r["failure"]["kind"] for r in stored} == {"timeout"} and len(stored) == 2
    # A failed run is not a finished one: the same run (same spec, so same run id) is tried again.
    retry = _reproduce(tiny_dir, tmp_path, "--timeout", "2", "--no-certify", "--frameworks", "pytorch")
    assert "0 already finished, 1 to run" in retry.stdout and retry.returncode == 1, retry.stdout + retry.stderr

    # Without the limit: other specs, so other run ids; their runs and the certificate run to the end.
    first = _reproduce(tiny_dir, tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    out = first.stdout
    assert "plan: 2 runs, profile quick on cpu, backend local; 0 already finished, 2 to run" in out
    assert "[run 1/2] tiny / pytorch / fixed r0 · ok" in out and "[run 2/2] tiny / tensorflow / fixed r0 · ok" in out
    assert f"report: {report_dir / 'report.md'}" in out
    files = sorted((report_dir / "results").glob("*.json"))
    assert len(files) == 2                               # this matrix's runs only, not the timed-out ones
    for f in files:
        assert results.problems(json.loads(f.read_text())) is None
    text = (report_dir / "report.md").read_text()
    assert "Quick profile on CPU: not the published setting" in text and "## Failed runs" not in text
    assert "| throughput (samples/s, after warmup)" in text and "| PyTorch / TensorFlow" in text
    assert "## Environment and provenance" in text
    for f in files:
        assert f"(results/{f.name})" in text

    again = _reproduce(tiny_dir, tmp_path)
    assert again.returncode == 0
    assert "2 already finished, 0 to run" in again.stdout and "[run" not in again.stdout

    fresh = _reproduce(tiny_dir, tmp_path, "--fresh", "--frameworks", "pytorch")
    assert "0 already finished, 1 to run" in fresh.stdout and fresh.returncode == 0
    # One framework only: no certificate can run, and the report says so instead of leaving it out.
    assert ("**Equivalence certificate: not run**: only PyTorch runs variant 'fixed' in this matrix"
            in (report_dir / "report.md").read_text())

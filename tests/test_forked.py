"""Work run beside the caller in forked workers (reprokit/report/forked.py), and the report whose figures are drawn
that way: each check runs in a fresh interpreter, as a user's command does, since a test runner's own threads
rightly keep the jobs in its process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(sys.platform != "linux" or len(os.sched_getaffinity(0)) < 2,
                                reason="forked workers are used on Linux with two cores or more")


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


JOBS = """
    import os, threading
    from reprokit.report import forked

    def where(shared, job):
        if job == "bad":
            raise ValueError("job bad failed")
        return os.getpid(), shared[job]

    def run(jobs):
        with forked.side_by_side(where, {"a": 1, "b": 2, "c": 3}, jobs) as results:
            here = os.getpid()               # the caller's own work goes on meanwhile
            got = results()
        return [(pid != here, value) for pid, value in got]
"""


def test_jobs_run_in_forked_workers_that_inherit_the_shared_object_and_come_back_in_order():
    out = _python(JOBS + """
    print(run(["c", "a", "b", "a"]))
    """)
    assert out.strip() == "[(True, 3), (True, 1), (True, 2), (True, 1)]"


def test_a_workers_error_reaches_the_caller():
    out = _python(JOBS + """
    try:
        run(["a", "bad"])
    except ValueError as exc:
        print("raised:", exc)
    """)
    assert out.strip() == "raised: job bad failed"


def test_with_another_thread_running_the_jobs_run_in_the_callers_process():
    out = _python(JOBS + """
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    print(run(["a", "b"]))
    stop.set()
    other.join()
    """)
    assert out.strip() == "[(False, 1), (False, 2)]"


def test_a_report_drawn_in_forked_workers_is_the_report_drawn_in_turn(tmp_path):
    """The same results (two experiments, and a sweep at 1 and 2 devices) written twice: alone (the figures drawn
    side by side) and with another thread running (drawn in this process, one after another); every file of the
    two is byte for byte the same."""
    _python(f"""
    import resource, threading
    from pathlib import Path
    from reprokit import report
    from reprokit.plan.experiments import BUILTIN_DIR, discover
    from reprokit.results.store import Store

    results = [r for folder in ("reports/quick-cpu/results", "tests/fixtures/sweep")
               for r in Store(Path(folder)).readable()[0]]
    experiments = discover([BUILTIN_DIR])
    report.write(Path({str(tmp_path / "forked")!r}), "t", results, experiments)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert workers.ru_utime > 0, "no figure was drawn in a worker"
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    report.write(Path({str(tmp_path / "in_turn")!r}), "t", results, experiments)
    stop.set()
    other.join()
    assert resource.getrusage(resource.RUSAGE_CHILDREN) == workers, "a worker drew a figure beside a thread"
    """)
    forked, in_turn = ({p.name: p.read_bytes() for p in (tmp_path / d).iterdir()} for d in ("forked", "in_turn"))
    assert sorted(forked) == sorted(in_turn) and sum(name.endswith(".png") for name in forked) == 7, sorted(forked)
    assert "at_two-scaling.png" in forked                  # the sweep's figure, from its runs at 1 and 2 devices
    assert forked == in_turn


SLEEPERS = """
    import sys, time
    from reprokit.report import forked

    def nap(shared, seconds):
        time.sleep(seconds)

    with forked.side_by_side(nap, None, [float(sys.argv[1])] * 4) as results:
        print("started", flush=True)
        results()
"""


def _workers_of(pid: int) -> set[int]:
    return {int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()}


def _gone(pids: set[int], within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not [p for p in pids if Path(f"/proc/{p}").exists() and "Z" not in _state(p)]:
            return True
        time.sleep(0.05)
    return False


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return "Z"


def _started(seconds: float) -> tuple[subprocess.Popen, set[int]]:
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SLEEPERS), str(seconds)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    workers = _workers_of(proc.pid)
    assert len(workers) == 2, workers
    return proc, workers


def test_ctrl_c_ends_the_caller_and_its_workers():
    proc, workers = _started(1.0)
    os.killpg(proc.pid, signal.SIGINT)                 # as a terminal's Ctrl-C reaches the whole group
    assert proc.wait(timeout=60) != 0
    assert _gone(workers), [(p, _state(p)) for p in workers]


def test_workers_end_with_a_caller_killed_outright():
    """A second Ctrl-C, or a timeout's kill, ends the caller at once without waiting for its pool."""
    proc, workers = _started(600.0)
    proc.kill()
    proc.wait(timeout=60)
    assert _gone(workers), [(p, _state(p)) for p in workers]

"""SIGTERM or Ctrl-C to a real `reprokit reproduce` (local runner): the kit's process stops within 10 s, every
finished result is kept, the command to go on is printed, and nothing is left behind; a second signal stops at once.
Faults from outside: signals to the orchestrator's real pid, results listed from the disk."""
from __future__ import annotations

import os
import shlex
import signal
import time
from pathlib import Path

import pytest
import stub_matrix as sm

from reprokit.environments import topology

STOP_WITHIN_S = 10

pytestmark = pytest.mark.alone


def _tmp_entries() -> set[str]:
    return set(os.listdir("/tmp"))


def _mounts() -> set[str]:
    """The mounts, less the Docker engine's own for containers (which other commands on this host start and end
    meanwhile; a local run starts none)."""
    lines = Path("/proc/mounts").read_text().splitlines()
    return {m for m in lines if not m.split()[1].startswith(("/var/lib/docker/", "/run/docker/"))}


def _next_run_started(state: Path):
    """Once a result is stored and a kit process of a run not finished exists: (the stored ids, the kits' pids)."""
    def check():
        done = {p.stem for p in (state / "results").glob("*.json")} if (state / "results").is_dir() else set()
        kits = [pid for pid, c in sm.kit_processes(state).items() if not any(d in c for d in done)]
        return (done, kits) if done and kits else None
    return check


def _children(pid: int) -> list[int]:
    return [int(k) for f in Path(f"/proc/{pid}/task").glob("*/children") for k in f.read_text().split()]


# SIGINT once takes the same handler as SIGTERM once (execute/stopping.py): the twice case covers SIGINT.
CASES = {"sigterm": ((signal.SIGTERM,), ()),
         "ctrl-c-twice": ((signal.SIGINT, signal.SIGINT), ()),
         # two slots at once, each run in a child process of its own: the parent's second signal reaches them
         "parallel-sigterm-twice": ((signal.SIGTERM, signal.SIGTERM), ("--parallel", "2"))}


@pytest.mark.parametrize("case", CASES)
def test_a_signal_stops_the_kit_keeps_results_and_says_how_to_go_on(tmp_path, case):
    signals, extra = CASES[case]
    exp = sm.experiment(tmp_path / "exp", epochs=400)           # each run trains for about 2 s
    state = tmp_path / "state"
    private_tmp = tmp_path / "tmpdir"
    private_tmp.mkdir()
    runs = 3 if extra else 2
    cmd = sm.command(tmp_path, exp, state, *extra, repeats=runs)
    tmp_before, mounts_before = _tmp_entries(), _mounts()
    log = tmp_path / "out.log"
    proc = sm.start(cmd, log, TMPDIR=str(private_tmp), **({topology.FAKE_SLOTS_ENV: "2"} if extra else {}))
    try:
        done, kits = sm.wait_for(_next_run_started(state), timeout=90)
        kept_before = sm.stored(state)
        children = _children(proc.pid)
        sent = time.monotonic()
        for i, sig in enumerate(signals):
            if i:
                time.sleep(0.05)
            os.kill(proc.pid, sig)
        out = sm.output(proc, log, timeout=STOP_WITHIN_S)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"{case}: exited {took:.2f} s after the signal")
    assert proc.returncode == 130, out[-2000:]
    assert took < STOP_WITHIN_S
    left = sm.wait_for(lambda: all(sm.gone(p) for p in kits + children), timeout=2)
    assert left, f"still running: {[p for p in kits + children if not sm.gone(p)]}"
    kept = sm.stored(state)                       # every file parses and passes the schema
    # With --parallel another run may finish between the two readings: each is a floor, not the same set.
    assert set(kept) >= set(kept_before) >= done and all(r["status"] == "ok" for r in kept.values())
    # the exact command line to go on with: the interpreter, -m and every argument, quoted as a shell wants them
    assert f"To go on, run: {shlex.join(cmd)}" in out, out[-2000:]
    assert out.count("To go on, run:") == 1, out[-2000:]
    if len(signals) == 2:
        assert "stopped at once" in out
    else:
        assert f"interrupted: finished results are kept in {state / 'results'} (1 of 2 runs)." in out
    assert not sm.kit_processes(state)
    assert not _mounts() - mounts_before, "a mount was left behind"
    assert not list(private_tmp.iterdir()), "temporary files were left behind"
    # The command's temporary files go to its TMPDIR, which must be empty; in /tmp itself (shared with whatever
    # else runs on this host) nothing of a command's may appear: its locks' folder, multiprocessing's.
    ours = {e for e in _tmp_entries() - tmp_before if e.startswith(("reprokit", "pymp-"))}
    assert not ours, f"files were left in /tmp: {ours}"
    if case == "sigterm":
        again = sm.run(cmd)                       # the same command goes on: only the run not finished
        assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
        assert "1 already finished, 1 to run" in again.stdout
        assert len(sm.stored(state)) == 2


def test_a_second_ctrl_c_while_the_command_exits_still_ends_it_with_130(tmp_path):
    """The second Ctrl-C sent once the command has said how to go on: it lands while Python shuts down, where
    the default handler would kill the process (status -2); the command must still end with 130."""
    exp = sm.experiment(tmp_path / "exp", epochs=400)
    state = tmp_path / "state"
    cmd = sm.command(tmp_path, exp, state, repeats=2)
    log = tmp_path / "out.log"
    proc = sm.start(cmd, log)
    try:
        sm.wait_for(_next_run_started(state), timeout=90)
        os.kill(proc.pid, signal.SIGINT)
        sm.wait_for(lambda: "To go on, run:" in log.read_text() or proc.poll() is not None, timeout=STOP_WITHIN_S)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)
        out = sm.output(proc, log, timeout=STOP_WITHIN_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out[-2000:]

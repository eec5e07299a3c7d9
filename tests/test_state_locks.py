"""One timed matrix per host at a time, with real commands: a second command on a state folder refuses (or waits
with --wait), two commands on different state folders never time runs on one device at once, a lock whose process
was killed is taken over and named; and what ran beside a run (a real busy process) is recorded and flagged."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import stub_matrix as sm

from reprokit.environments.envs import ENVS
from reprokit.execute.executors import HostExecutor
from reprokit.report import pair_findings
from reprokit.runners.base import KitCall
from reprokit.runners.local import LocalRunner


def _holding(state: Path) -> dict:
    """The state folder's lock record, once its command holds it."""
    def read():
        lock = state / "command.lock"
        text = lock.read_text() if lock.exists() else ""
        return json.loads(text) if text else None
    return sm.wait_for(read, timeout=60)


def _finish(proc: subprocess.Popen[str], log: Path) -> str:
    out = sm.output(proc, log, timeout=120)
    assert proc.returncode == 0, out[-3000:]
    return out


def test_a_second_command_on_a_state_folder_refuses_or_waits(tmp_path):
    exp = sm.experiment(tmp_path / "exp", epochs=800)           # a run of about 4 s
    state = tmp_path / "state"
    first = sm.start(sm.command(tmp_path, exp, state, repeats=1), tmp_path / "first.log")
    waiting = None
    try:
        record = _holding(state)
        assert record["pid"] == first.pid
        waiting = sm.start(sm.command(tmp_path, exp, state, "--wait", repeats=1), tmp_path / "waiting.log")
        refused = sm.run(sm.command(tmp_path, exp, state, repeats=1))
        assert refused.returncode == 2
        line = refused.stderr.strip()
        assert line.startswith(f"error: another command is using the state folder {state}: pid {first.pid} (`")
        assert "reprokit reproduce" in line and "since 2" in line and "add --wait" in line
        assert "Traceback" not in refused.stderr and len(line.splitlines()) == 1
        dry = sm.run(sm.command(tmp_path, exp, state, "--dry-run", repeats=1))       # a dry run takes no lock
        assert dry.returncode == 0, dry.stderr
        _finish(first, tmp_path / "first.log")
        out = _finish(waiting, tmp_path / "waiting.log")
    finally:
        for p in (first, waiting):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert out.count("waiting for the state folder") == 1 and f"pid {first.pid}" in out, out[-2000:]
    assert "1 already finished, 0 to run" in out           # it waited, so it found the first command's run
    assert len(sm.stored(state)) == 1


def _windows(state: Path) -> list[tuple[float, float]]:
    """Each stored run's (start, end) on the wall clock: its result file's time less the kit process's seconds."""
    out = []
    for path in (state / "results").glob("*.json"):
        end = path.stat().st_mtime
        out.append((end - json.loads(path.read_text())["launcher"]["wall_s"], end))
    return out


def test_two_state_folders_never_time_runs_on_one_device_at_once(tmp_path):
    # a's run (about 12 s quiet) outlasts b's start, planning included, on a loaded host too: the two must overlap
    long, short = sm.experiment(tmp_path / "long", epochs=2400), sm.experiment(tmp_path / "short", epochs=200)
    a = sm.start(sm.command(tmp_path, long, tmp_path / "a", repeats=1), tmp_path / "a.log")
    _holding(tmp_path / "a")
    sm.wait_for(lambda: sm.kit_processes(tmp_path / "a"), timeout=60)      # a is timing its first run
    b = sm.start(sm.command(tmp_path, short, tmp_path / "b", repeats=2), tmp_path / "b.log")
    out_a, out_b = _finish(a, tmp_path / "a.log"), _finish(b, tmp_path / "b.log")
    waited = [line for line in (out_a + out_b).splitlines() if "waiting for CPU" in line]
    assert waited, out_b[-2000:]
    assert all(f"pid {a.pid}" in line or f"pid {b.pid}" in line for line in waited)
    assert len(waited) <= 3                                     # once per run that waits, not once per CPU
    runs = sorted(_windows(tmp_path / "a") + _windows(tmp_path / "b"))
    assert len(runs) == 3
    # A window's end is its result file's time: the store writes it after the run gives its device lock back
    # (0.14 s after, once, on this 2-core VM), so a window may seem to end that much late. Runs timed at once
    # would overlap by most of a run (each takes seconds here).
    for (_, end), (start, _) in zip(runs, runs[1:]):
        assert start >= end - 1.0, f"two runs were timed at once: {runs}"


def test_a_certificate_side_waits_for_a_timed_run_on_its_devices_and_stands_in_the_ledger(tmp_path, capsys):
    """A kit process that is no timed run (a certificate's side) goes through the executor's gate: it waits for
    the CPUs another command times a run on, then runs, with its entry in its own command's ledger."""
    exp = sm.experiment(tmp_path / "exp", epochs=800)           # a run of about 4 s
    a = sm.start(sm.command(tmp_path, exp, tmp_path / "a", repeats=1), tmp_path / "a.log")
    sm.wait_for(lambda: sm.kit_processes(tmp_path / "a"), timeout=60)      # a is timing its run
    executor = HostExecutor(tmp_path / "b" / "work", tmp_path / "b" / "ledger", device="cpu")
    gated = executor.untimed(LocalRunner(ENVS, tmp_path / "data", "cpu", python=Path(sys.executable)))
    call = KitCall("pytorch", "reprokit.kits.run", ("--help",), output=tmp_path / "b" / "out", label="certify-pytorch")
    outcome = gated.run(call, lambda event: None)
    _finish(a, tmp_path / "a.log")
    assert outcome.exit_code == 0, outcome.log_tail
    assert "waiting for CPU" in capsys.readouterr().out
    (entry,) = [json.loads(p.read_text()) for p in (tmp_path / "b" / "ledger").glob("*.json")]
    assert (entry["experiment"], entry["framework"], entry["variant"]) == ("untimed", "pytorch", "certify-pytorch")
    ((_, a_end),) = _windows(tmp_path / "a")
    assert entry["start"] >= a_end - 1.0 and entry["end"] >= entry["start"], (entry, a_end)


def test_the_lock_of_a_killed_command_is_taken_over_and_named(tmp_path):
    exp = sm.experiment(tmp_path / "exp", epochs=300)
    state = tmp_path / "state"
    first = sm.start(sm.command(tmp_path, exp, state, repeats=1), tmp_path / "first.log")
    kits = sm.wait_for(lambda: sm.kit_processes(state), timeout=60)
    os.kill(first.pid, signal.SIGKILL)                          # no clean-up at all: its records stay
    first.wait()
    for kit in kits:                                            # its kit, in a session of its own, trains on
        os.killpg(kit, signal.SIGKILL)
    sm.wait_for(lambda: all(sm.gone(k) for k in kits), timeout=10)
    again = sm.run(sm.command(tmp_path, exp, state, repeats=1))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    took = [line for line in again.stderr.splitlines() if "took over the lock" in line]
    assert len(took) == 2, again.stderr                         # the state folder's, and its CPUs' in one line
    assert took[0].startswith(f"the state folder {state}: took over the lock of pid {first.pid} (`")
    assert took[1].startswith("CPU 0") and f"pid {first.pid}" in took[1]
    assert all(line.endswith("which is gone") for line in took)


BUSY = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end:\n    pass\n"


def test_a_busy_process_beside_the_runs_is_recorded_and_flags_their_ratio(tmp_path, kit_python):
    """PyTorch and the stub, once beside a real busy loop and once on their own: the ratio is flagged in report.md
    only the first time."""
    exp = sm.experiment(tmp_path / "exp", frameworks='"pytorch", "stub"')
    torch = kit_python("pytorch")
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        time.sleep(0.5)
        loaded = sm.run(sm.command(tmp_path, exp, tmp_path / "loaded", "--name", "loaded", repeats=1,
                                   frameworks="pytorch,stub", python=torch), timeout=300)
    finally:
        busy.kill()
        busy.wait()
    assert loaded.returncode == 0, loaded.stdout[-2000:] + loaded.stderr[-2000:]
    quiet = sm.run(sm.command(tmp_path, exp, tmp_path / "quiet", "--name", "quiet", repeats=1,
                              frameworks="pytorch,stub", python=torch), timeout=300)
    assert quiet.returncode == 0, quiet.stdout[-2000:] + quiet.stderr[-2000:]
    readings = {}
    for name in ("loaded", "quiet"):
        for path in (tmp_path / name / "results").glob("*.json"):
            r = json.loads(path.read_text())
            readings[name, r["framework"]] = r["timing"]["co_load"]
    print(readings)
    assert readings["loaded", "pytorch"]["other_cores"] > 0.8           # the busy loop: about one core
    assert all(c["cpus_allowed"] >= 1 and len(c["load_average"]) == 3 for c in readings.values())
    flagged = (tmp_path / "reports" / "loaded" / "report.md").read_text()
    assert "**ratio-beside-load** (warning)" in flagged and "PyTorch r0: other processes kept" in flagged
    # Without the loop the flag is absent, unless something else on this host kept the runs' CPUs as busy (a
    # machine shared with other work): the report says what the readings say, no more, no less.
    busy = [fw for (name, fw), c in readings.items() if name == "quiet"
            and c["other_cores"] - c.get("resolution_cores", 0) > pair_findings.OTHER_CORES_THRESHOLD]
    assert ("ratio-beside-load" in (tmp_path / "reports" / "quiet" / "report.md").read_text()) == bool(busy)


def test_damaged_ledger_entries_are_set_aside_and_the_runs_go_on(tmp_path):
    """Entries of other runs cut short (as a crash or a full disk leaves one) or JSON but not ledger entries (no
    fields, a pid that is not a number), and the run's own entry damaged while it runs: each named once, moved to
    quarantine/, never fatal; the run's result kept, its co-load record simply lacks them."""
    exp = sm.experiment(tmp_path / "exp", epochs=400)           # a run of about 2 s
    state = tmp_path / "state"
    ledger = state / "ledger"
    ledger.mkdir(parents=True)
    full = {"run_id": "a" * 16, "experiment": "tiny", "framework": "stub", "variant": "fixed", "repeat": 0,
            "pid": "x", "slot": None, "start": 1.0, "end": None}
    for name, entry in (("0" * 16, {}), ("1" * 16, {"pid": "x"}), ("a" * 16, full)):
        (ledger / f"{name}.json").write_text(json.dumps(entry))
    cut = "0123456789abcdef"
    (ledger / f"{cut}.json").write_text(f'{{"run_id": "{cut}", "experiment": "ti')
    others = ("0" * 16, "1" * 16, "a" * 16, cut)
    log = tmp_path / "out.log"
    proc = sm.start(sm.command(tmp_path, exp, state, repeats=1), log)
    own = sm.wait_for(lambda: next((p for p in ledger.glob("*.json") if p.stem not in others), None))
    own.write_text('{"pid": "x"}')                              # from outside, while its run trains
    out = sm.output(proc, log, timeout=120)
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out
    named = [x for x in out.splitlines() if x.startswith("ledger entry ")]
    assert sorted(x.split()[2] for x in named) == sorted([*others, own.stem]), out[-3000:]
    assert any(x.startswith(f"ledger entry {cut} was damaged (unterminated JSON); moved to ") for x in named), named
    assert not (ledger / f"{cut}.json").exists()
    assert {p.name.split(".json")[0] for p in (ledger / "quarantine").iterdir()} == {*others, own.stem}
    (result,) = sm.stored(state).values()
    assert result["status"] == "ok" and result["run_id"] == own.stem
    assert json.loads((state / "results" / f"{own.stem}.json").read_text())["launcher"]["co_load"] == []

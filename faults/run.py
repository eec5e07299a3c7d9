"""The fault-injection suite (`nox -s faults`): each fault injected from outside into a real matrix.

Every fault is made as it happens to a user, never by patching the kit: signals to the orchestrator's
real process id, bytes cut off a file on disk, a file system that is really full, a Docker engine that
is really killed, a node of a real Ray cluster taken away, users' scripts that fail or fork without end.
Each runs `reprokit reproduce` on the quick profile (faults/tiny.toml: a run takes a few seconds) in a
scratch folder of its own, and is judged by what a user would see and by an independent listing of the
folders, not by what the kit says of itself:

  survived   the command ended as the issue asks (its exit status, one sentence, no traceback)
  kept       the finished results still there afterwards, byte for byte, of those finished before
  leftovers  kit processes, containers, mounts under the scratch folder and half-written files
             that were not there before

The last line is `faults survived: N of N, results lost: L`; the exit status is 0 only if every fault
was survived with nothing lost or left. `--fast` runs the faults that no test of the suite proves already
(CI runs these; PROVED_IN_CI names the test for each other one); `--only NAME` one fault.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tabulate import tabulate

from faults.harness import Failed, Line, NotRun, Suite
from faults.injections import (
    ctrl_c_twice,
    damaged_report,
    damaged_result,
    disk_full,
    engine_killed,
    gpu_refused,
    kill_9,
    node_lost,
    oom,
    script_fault,
    sigterm,
    sigterm_docker,
    timeout,
    two_commands,
    two_state_folders,
)
from faults.listing import snapshot

FAULTS: dict[str, Callable[[Suite, Line], None]] = {
    "sigterm": sigterm,
    "sigterm, docker": sigterm_docker,
    "ctrl-c twice": ctrl_c_twice,
    "kill -9": kill_9,
    "damaged result": damaged_result,
    "damaged report": damaged_report,
    "two commands": two_commands,
    "two state folders": two_state_folders,
    "disk full": disk_full,
    "timeout": timeout,
    "exit code": script_fault("exit_code.py", "exit-code"),
    "invalid output": script_fault("exits_early.py", "invalid-output"),
    "oom": oom,
    "gpu refused": gpu_refused,
    "fork bomb": script_fault("fork_bomb.py", "timeout", "tensorflow", "docker", ("--timeout", "30")),
    "engine killed": engine_killed,
    "node lost": node_lost,
}
# Where CI's suite proves a fault already, with the same injection from outside on a real run: `--fast` (CI's
# subset, tests/test_fault_suite.py) runs only the others, so CI covers every fault once.
PROVED_IN_CI: dict[str, str] = {
    "sigterm": "tests/test_signals.py::test_a_signal_stops_the_kit_keeps_results_and_says_how_to_go_on",
    "sigterm, docker": "tests/test_docker_faults.py::test_a_second_ctrl_c_removes_the_running_container_at_once",
    "ctrl-c twice": "tests/test_signals.py::test_a_second_ctrl_c_while_the_command_exits_still_ends_it_with_130",
    "kill -9": "tests/test_orphans.py::test_a_killed_orchestrator_takes_its_local_kit_process_with_it",
    "damaged result": "tests/test_state_files.py::test_reproduce_with_a_result_cut_short_runs_that_run_again",
    "two commands": "tests/test_state_locks.py::test_a_second_command_on_a_state_folder_refuses_or_waits",
    "two state folders": "tests/test_state_locks.py::test_two_state_folders_never_time_runs_on_one_device_at_once",
    "disk full": "tests/test_disk_full.py::test_a_full_state_folder_loses_one_run_and_stops_in_one_sentence",
    "timeout": ("tests/test_reproduce.py::"
                "test_a_timeout_is_recorded_then_reproduce_writes_results_and_report_and_resumes"),
    "oom": "tests/test_docker_runner.py::test_host_memory_oom_is_recorded_as_oom",
    "gpu refused": "tests/test_docker_runner.py::test_gpus_without_nvidia_runtime_fail_before_any_container",
    "fork bomb": "tests/test_docker_faults.py::test_a_fork_bomb_ends_as_a_failed_run_and_the_host_keeps_answering",
    "engine killed": ("tests/test_docker_faults.py::"
                      "test_an_engine_killed_mid_run_is_engine_lost_then_the_matrix_waits_for_it"),
    "node lost": "tests/test_ray_backend.py::test_a_lost_node_is_retried_elsewhere_and_nothing_is_lost",
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nox -s faults --", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fast", action="store_true", help="only the faults no test of the suite proves (CI runs these)")
    p.add_argument("--only", action="append", choices=FAULTS, help="only this fault (repeatable)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder (its logs) afterwards")
    args = p.parse_args(argv)
    names = args.only or [n for n in FAULTS if not (args.fast and n in PROVED_IN_CI)]
    scratch = Path(tempfile.mkdtemp(prefix="reprokit-faults-"))
    suite = Suite(scratch)
    lines = []
    t0 = time.monotonic()
    try:
        for name in names:
            line = Line(name)
            before = snapshot(scratch)
            t = time.monotonic()
            try:
                FAULTS[name](suite, line)
                line.survived = True
            except Failed as exc:
                line.why = str(exc)
            except NotRun as exc:
                line.run, line.why = False, str(exc)
            except Exception as exc:  # noqa: BLE001 - the suite's own failure is a fault not survived
                line.why = f"the suite failed: {exc!r}"
            time.sleep(0.5)
            line.leftovers = sorted(snapshot(scratch) - before)
            lines.append(line)
            print(f"{name}: {verdict(line)} in {time.monotonic() - t:.0f} s", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    rows = [[ln.fault, ln.injected, verdict(ln), ln.why, f"{ln.kept} of {ln.finished}",
             "; ".join(ln.leftovers) or "none"] for ln in lines]
    print(tabulate(rows, headers=["fault", "injected", "survived", "how", "results kept", "leftovers"],
                   tablefmt="github"))
    made = [ln for ln in lines if ln.run]
    survived = sum(verdict(ln) == "yes" for ln in made)
    lost = sum(ln.finished - ln.kept for ln in lines)
    not_run = [ln.fault for ln in lines if not ln.run]
    print(f"\nfaults survived: {survived} of {len(made)}, results lost: {lost}"
          + (f"; not run here: {', '.join(not_run)} (see above why)" if not_run else "")
          + f"  ({time.monotonic() - t0:.0f} s{'; scratch kept in ' + str(scratch) if args.keep else ''})")
    return 0 if survived == len(made) and lost == 0 else 1


def verdict(line: Line) -> str:
    if not line.run:
        return "not run"
    return "yes" if line.survived and not line.leftovers else "NO"


if __name__ == "__main__":
    sys.exit(main())

"""Run the matrix on one node: one run per slot at once, each result stored the moment it ends.

With one slot the runs go one after another in this process. With more, each
run is a child process of its own (so a Ctrl-C reaches every runner's own
clean-up: the kit's process group, the container) pinned to its slot, and
the results come back through a pipe to be stored here, in one place.

The ledger says what ran beside what: every run on a node writes when it
started and ended into the node's ledger folder, and a run's result records
the other runs whose time overlapped its own (``launcher.co_load``).
"""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

from kits.common.files import write_json_atomic
from reprokit.console import RunProgress
from reprokit.environments.topology import Placement
from reprokit.execute import gpu_state
from reprokit.runners.base import Runner, Spec, run_spec

STOP_GRACE_S = 60      # how long interrupted runs get to clean up (kill the kit, remove the container)

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess

    from reprokit.results.store import Store

    Finished = Callable[[dict[str, Any], RunProgress], None]
    Running = dict[Connection, tuple[SpawnProcess, Placement, RunProgress]]


class Ledger:
    """The runs in progress on one node, and those that ended while another was still running."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _entries(self) -> list[dict[str, Any]]:
        out = []
        for path in self.root.glob("*.json"):
            try:
                entry = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if entry["end"] is None and not _alive(entry["pid"]):
                path.unlink(missing_ok=True)        # its process died without saying so
                continue
            out.append(entry)
        return out

    def begin(self, spec: Spec, placement: Placement | None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.root / f"{spec.run_id}.json", {
            "run_id": spec.run_id, "experiment": spec.experiment, "framework": spec.framework,
            "variant": spec.variant, "repeat": spec.repeat, "pid": os.getpid(),
            "slot": placement.gpu_uuid if placement else None, "start": time.time(), "end": None})

    def end(self, run_id: str) -> list[dict[str, Any]]:
        """Mark a run ended; the other runs that overlapped it, with the seconds they overlapped."""
        now = time.time()
        path = self.root / f"{run_id}.json"
        mine = json.loads(path.read_text())
        mine["end"] = now
        write_json_atomic(path, mine)
        entries = self._entries()
        co = [{k: e[k] for k in ("run_id", "experiment", "framework", "variant", "repeat", "slot")}
              | {"overlap_s": round(min(now, e["end"] or now) - max(mine["start"], e["start"]), 3)}
              for e in entries if e["run_id"] != run_id and e["start"] < now
              and (e["end"] is None or e["end"] > mine["start"])]
        # An ended run matters only to runs that were going on then: drop those older than every running one.
        oldest = min((e["start"] for e in entries if e["end"] is None), default=now)
        for e in entries:
            if e["end"] is not None and e["end"] < oldest:
                (self.root / f"{e['run_id']}.json").unlink(missing_ok=True)
        return sorted(co, key=lambda c: c["run_id"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def run_placed(runner: Runner, spec: Spec, work: Path, ledger: Ledger, placement: Placement | None,
               on_progress: Callable[[dict[str, Any]], None]) -> dict[str, Any] | None:
    """One run in its slot, with the co-load record; None when interrupted.

    A GPU run's GPU is read on the host before and after (a container cannot see other processes).
    """
    gpu = spec.device == "gpu"
    before = gpu_state.snapshot() if gpu else None
    ledger.begin(spec, placement)
    try:
        result = run_spec(runner, spec, work, on_progress, placement=placement)
    finally:
        co_load = ledger.end(spec.run_id)
    if result is None:
        return None
    launcher = result.setdefault("launcher", {})
    launcher["co_load"] = co_load
    if gpu:
        after = gpu_state.snapshot()
        launcher["gpu_state"] = {"before": before, "after": after}
        if result["status"] == "ok":
            result["findings"] += gpu_state.findings(before, after, result)   # about the run's own GPU
    return result


def _child(runner: Runner, spec: Spec, work: Path, ledger_root: Path, placement: Placement,
           conn: Connection) -> None:
    """A slot's process: the first Ctrl-C stops the run (the runner cleans up), later ones are ignored."""
    def first(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, first)
    try:
        result = run_placed(runner, spec, work, Ledger(ledger_root), placement,
                            lambda event: conn.send(("progress", event)))
    except KeyboardInterrupt:
        result = None
    conn.send(("result", result))
    conn.close()


def run_all(runner: Runner, todo: Sequence[Spec], slots: list[Placement | None], work: Path, ledger_root: Path,
            store: Store, progress_for: Callable[[int, Spec], RunProgress]) -> tuple[int, bool]:
    """Run every spec, at most one per slot at once; (failed runs, interrupted).

    progress_for(i, spec) makes the progress display of the i-th run (from 0) as it starts.
    """
    tally = _Tally(store)
    if len(slots) == 1:
        interrupted = _one_at_a_time(runner, todo, work, Ledger(ledger_root), slots[0], progress_for, tally.finished)
    else:
        # several slots are GPU placements, never None (None is the one slot of every assigned GPU)
        interrupted = _side_by_side(runner, todo, cast("list[Placement]", slots), work, ledger_root, progress_for,
                                    tally.finished)
    return tally.failures, interrupted


class _Tally:
    """Stores each result as it comes and counts the failed ones."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.failures = 0

    def finished(self, result: dict[str, Any], progress: RunProgress) -> None:
        self.store.put(result)
        self.failures += result["status"] != "ok"
        progress.done(result["status"] if result["status"] == "ok"
                      else f"FAILED ({result['failure']['kind']}: {result['failure']['message']})")


def _one_at_a_time(runner: Runner, todo: Sequence[Spec], work: Path, ledger: Ledger, slot: Placement | None,
                   progress_for: Callable[[int, Spec], RunProgress], finished: Finished) -> bool:
    for i, spec in enumerate(todo):
        progress = progress_for(i, spec)
        result = run_placed(runner, spec, work, ledger, slot, progress)
        if result is None:
            return True
        finished(result, progress)
    return False


def _side_by_side(runner: Runner, todo: Sequence[Spec], slots: list[Placement], work: Path, ledger_root: Path,
                  progress_for: Callable[[int, Spec], RunProgress], finished: Finished) -> bool:
    """One child process per slot, each running one spec at a time; True when interrupted."""
    ctx = multiprocessing.get_context("spawn")
    free = list(slots)
    queue = list(enumerate(todo))
    running: Running = {}                # connection -> (process, slot, progress)
    try:
        while queue or running:
            while queue and free:
                i, spec = queue.pop(0)
                slot = free.pop(0)
                progress = progress_for(i, spec)
                progress.label += f" · {slot.gpu_uuid}"
                progress.tty = False     # several runs at once: lines, not one line rewritten in place
                mine, theirs = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(runner, spec, work, ledger_root, slot, theirs), daemon=False)
                proc.start()
                theirs.close()
                running[mine] = (proc, slot, progress)
            for conn in cast("list[Connection]", wait(list(running))):    # wait() gives back what it was given
                proc, slot, progress = running[conn]
                try:
                    kind, payload = conn.recv()
                except EOFError:
                    proc.join()
                    del running[conn]
                    _stop(running, finished)
                    raise RuntimeError(f"a run's process ended with status {proc.exitcode} and no result") from None
                if kind == "progress":
                    progress(payload)
                    continue
                proc.join()
                del running[conn]
                free.append(slot)
                if payload is None:          # that run was interrupted: so are the others
                    _stop(running, finished)
                    return True
                finished(payload, progress)
    except KeyboardInterrupt:
        _stop(running, finished)
        return True
    return False


def _stop(running: Running, finished: Finished) -> None:
    """Pass the Ctrl-C on to every run still going, keep any that ends with a result, wait for the rest."""
    for proc, _, _ in running.values():
        if proc.is_alive() and proc.pid is not None:       # alive: started, so it has a pid
            os.kill(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    while running and time.monotonic() < deadline:
        for conn in cast("list[Connection]", wait(list(running), timeout=max(0.0, deadline - time.monotonic()))):
            proc, slot, progress = running[conn]
            try:
                kind, payload = conn.recv()
            except EOFError:
                kind, payload = "result", None
            if kind == "result":
                del running[conn]
                proc.join(5)
                if payload is not None:
                    finished(payload, progress)
    for proc, _, _ in running.values():
        proc.kill()

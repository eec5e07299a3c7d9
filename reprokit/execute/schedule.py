"""Run the matrix on one node: one run per slot at once, each result stored the moment it ends.

With one slot the runs go one after another in this process. With more, each
run is a child process of its own (so a Ctrl-C reaches every runner's own
clean-up: the kit's process group, the container) pinned to its slot, and
the results come back through a pipe to be stored here, in one place.

The ledger says what ran beside what: every run on a node writes when it
started and ended into the node's ledger folder, and a run's result records
the other runs whose time overlapped its own (``launcher.co_load``).

Each timed run holds the host-wide lock of every device it times on (its GPUs, or
its CPUs: reprokit/execute/locks.py), so two commands never time runs on one
device at once; ``--parallel`` slots each hold their own GPU's.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import json
import multiprocessing
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from reprokit.console import RunProgress
from reprokit.environments import host_checks
from reprokit.environments.topology import Placement, parse_cpulist, usable_cpus
from reprokit.errors import UserError
from reprokit.execute import disk_full, gpu_state, locks, stopping
from reprokit.execute.device_placement import Pool, declare_models, held, start_order
from reprokit.kits.contract.files import write_json_atomic
from reprokit.kits.contract.spec import Spec
from reprokit.kits.framework_free import parent_death
from reprokit.results import quarantine
from reprokit.runners import live
from reprokit.runners.base import Runner, run_spec

STOP_GRACE_S = 60      # how long interrupted runs get to clean up (kill the kit, remove the container)

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess

    from reprokit.results.store import Store

    Finished = Callable[[dict[str, Any], RunProgress], None]
    Running = dict[Connection, tuple[SpawnProcess, Placement, RunProgress, Spec]]


class Ledger:
    """The runs in progress on one node, and those that ended while another was still running."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._begun: dict[str, dict[str, Any]] = {}     # this process's own entries, as begin() wrote them

    def _entries(self) -> list[dict[str, Any]]:
        out = []
        for path in self.root.glob("*.json"):
            entry = self._read(path)
            if entry is None:
                continue
            if entry["end"] is None and not _alive(entry["pid"]):
                path.unlink(missing_ok=True)        # its process died without saying so
                continue
            out.append(entry)
        return out

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        """An entry, or None where it is gone or damaged (set aside: the co-load record then lacks that run)."""
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            entry = json.loads(text)
        except ValueError:                     # not JSON, or not UTF-8 text
            entry, why = None, quarantine.why_unreadable(text)
        else:
            why = "" if _well_formed(entry) else "not a ledger entry"
        if why:
            quarantine.set_aside(path, f"ledger entry {path.stem}", why,
                                 "the co-load records of the runs beside it will not name it")
            return None
        return cast("dict[str, Any]", entry)

    def begin(self, spec: Spec, placement: Placement | None) -> None:
        self.begin_entry(spec.run_id, spec.experiment, spec.framework, spec.variant, spec.repeat,
                         placement.name if placement else None)

    def begin_entry(self, run_id: str, experiment: str, framework: str, variant: str, repeat: int,
                    slot: str | None) -> None:
        """A timed run's entry, or a kit process's that is none (reprokit/execute/untimed.py)."""
        self.root.mkdir(parents=True, exist_ok=True)
        entry = {"run_id": run_id, "experiment": experiment, "framework": framework, "variant": variant,
                 "repeat": repeat, "pid": os.getpid(), "slot": slot, "start": time.time(), "end": None}
        write_json_atomic(self.root / f"{run_id}.json", entry)
        self._begun[run_id] = entry

    def end(self, run_id: str) -> list[dict[str, Any]]:
        """Mark a run ended; the other runs that overlapped it, with the seconds they overlapped."""
        now = time.time()
        path = self.root / f"{run_id}.json"
        self._read(path)        # its own entry damaged meanwhile: set aside and named before it is written over
        mine = {**self._begun.pop(run_id), "end": now}
        try:
            write_json_atomic(path, mine)
        except OSError as exc:
            if not disk_full.is_full(exc):
                raise
            path.unlink(missing_ok=True)         # a full disk: the entry goes, the run's result matters more
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


LEDGER_KEYS = {"run_id", "experiment", "framework", "variant", "repeat", "pid", "slot", "start", "end"}


def _well_formed(entry: Any) -> bool:
    """An entry the co-load record can read: every field there, with its type (a pid that is a number ...)."""
    def of(v: Any, *types: type) -> bool:
        return isinstance(v, types) and not isinstance(v, bool)
    return (isinstance(entry, dict) and LEDGER_KEYS <= entry.keys()
            and all(of(entry[k], str) for k in ("run_id", "experiment", "framework", "variant"))
            and of(entry["pid"], int) and of(entry["repeat"], int) and of(entry["start"], int, float)
            and (entry["slot"] is None or of(entry["slot"], str))
            and (entry["end"] is None or of(entry["end"], int, float)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def devices_of(spec: Spec, placement: Placement | None, gpus: tuple[str, ...] | None = None) -> list[str]:
    """What a run times on, as lock names: its slot's GPUs; a fake slot's CPUs; every CPU it may use; or the
    assigned GPUs (``gpus``; None: every GPU of the host, where the caller does not know which were assigned)."""
    if placement is not None:
        if placement.fake:
            return [f"cpu{c}" for c in sorted(parse_cpulist(placement.cpus))]
        return placement.name.split(",")
    return timed_on(spec.device, gpus)


def timed_on(device: str, gpus: tuple[str, ...] | None) -> list[str]:
    """The devices a run of ``device`` without a slot times on: every CPU it may use, or the assigned GPUs."""
    if device != "gpu":
        return [f"cpu{c}" for c in sorted(usable_cpus())]
    if gpus is None:
        try:
            gpus = tuple(g["uuid"] or f"gpu{g['index']}" for g in host_checks.resolve_gpus("all"))
        except UserError:
            gpus = ()
    return list(gpus) or ["gpu-unknown"]


def run_placed(runner: Runner, spec: Spec, work: Path, ledger: Ledger, placement: Placement | None,
               on_progress: Callable[[dict[str, Any]], None],
               gpus: tuple[str, ...] | None = None) -> dict[str, Any] | None:
    """One run in its slot, holding its devices' locks, with the co-load record; None when interrupted.

    A GPU run's GPU is read on the host before and after (a container cannot see other processes).
    """
    with locks.devices(devices_of(spec, placement, gpus)):
        return _run_locked(runner, spec, work, ledger, placement, on_progress)


def _run_locked(runner: Runner, spec: Spec, work: Path, ledger: Ledger, placement: Placement | None,
                on_progress: Callable[[dict[str, Any]], None]) -> dict[str, Any] | None:
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


def _child(runner: Runner, spec: Spec, work: Path, ledger_root: Path, placement: Placement, command: str,
           parent: int, conn: Connection) -> None:
    """A slot's process, for the parent's ``command``: the parent's first signal stops the run (the runner cleans
    up), its second at once, and its death (kill -9) ends this process too, whose own kit process then dies with
    it. A full disk comes back as the error it is, for the parent to name."""
    parent_death.arm(parent)
    stopping.install(terminal=False)
    locks.on_behalf_of(command)
    try:
        result: dict[str, Any] | str | None = run_placed(runner, spec, work, Ledger(ledger_root), placement,
                                                         lambda event: conn.send(("progress", event)))
    except KeyboardInterrupt:
        result = None
    except UserError as exc:        # one sentence (an engine that did not come back): the parent says it
        conn.send(("user-error", str(exc)))
        conn.close()
        return
    except OSError as exc:
        if not disk_full.is_full(exc):
            raise
        conn.send(("disk-full", str(exc)))
        conn.close()
        return
    conn.send(("result", result))
    conn.close()


def run_all(runner: Runner, todo: Sequence[Spec], slots: list[Placement | None], work: Path, ledger_root: Path,
            store: Store, progress_for: Callable[[int, Spec], RunProgress],
            gpus: tuple[str, ...] | None = None, at_once: int | None = None,
            models: dict[str, str] | None = None) -> tuple[int, bool]:
    """Run every spec, each holding as many slots as its devices, at most ``at_once`` runs at once (None: one per
    slot); (failed runs, interrupted). DiskFull where the state folder filled up, after naming the run that was lost.

    progress_for(i, spec) makes the progress display of the i-th run (from 0) as it starts; ``gpus`` are the
    assigned GPUs a run without a slot ([None]) times on (None: every GPU of the host); ``models`` each GPU's model,
    where --mixed-gpus let a sweep run on GPUs that differ in model: each result declares it.
    """
    tally = _Tally(store, work, len(todo), models)
    # slots other than [None] are GPU placements (None is the one slot of every assigned GPU)
    pool = None if slots == [None] else Pool(cast("list[Placement]", slots), at_once or len(slots))
    if pool is None or pool.at_once == 1:
        interrupted = _one_at_a_time(runner, todo, work, Ledger(ledger_root), pool, progress_for, tally, gpus)
    else:
        interrupted = _side_by_side(runner, todo, pool, work, ledger_root, progress_for, tally)
    return tally.failures, interrupted


def _label(spec: Spec | dict[str, Any]) -> str:
    s = spec.to_dict() if not isinstance(spec, dict) else spec
    return f"run {s['run_id']} ({s['experiment']} / {s['framework']} / {s['variant']} r{s['repeat']})"


class _Tally:
    """Stores each result as it comes and counts the failed ones; a full disk stops the matrix."""

    def __init__(self, store: Store, work: Path, runs: int, models: dict[str, str] | None = None) -> None:
        self.store = store
        self.models = models
        self.work = work
        self.runs = runs
        self.stored = 0
        self.failures = 0

    def finished(self, result: dict[str, Any], progress: RunProgress) -> None:
        """Store a result; DiskFull (after naming the run lost) where it could not be written, or where the kit's
        own writes found the disk full (the next run would only fail the same way)."""
        self.keep(result, progress)
        failure = result.get("failure") or {}
        if failure.get("kind") == "disk-full":
            disk_full.lost(_label(result["spec"]), failure["message"])
            raise self.full()

    def keep(self, result: dict[str, Any], progress: RunProgress) -> None:
        if self.models:
            declare_models(result, self.models)
        try:
            self.store.put(result)
        except OSError as exc:
            if not disk_full.is_full(exc):
                raise
            progress.done("LOST (disk-full)")
            disk_full.lost(_label(result["spec"]), f"its result could not be written: {exc.strerror}")
            raise self.full() from None
        self.stored += 1
        self.failures += result["status"] != "ok"
        _keep_figures(self.work / result["run_id"], self.store.root.parent / "figures" / result["run_id"])
        progress.done(result["status"] if result["status"] == "ok"
                      else f"FAILED ({result['failure']['kind']}: {result['failure']['message']})")

    def after_full(self, result: dict[str, Any], progress: RunProgress) -> None:
        """A run that ends once the disk is full: kept if it still fits, else named lost; never raises."""
        try:
            self.keep(result, progress)
        except disk_full.DiskFull:
            pass

    def full(self) -> disk_full.DiskFull:
        return disk_full.stop(self.store.root.parent, self.runs - self.stored + self.failures,
                              disk_full.per_run(self.store.root, self.work))

    def could_not_start(self, spec: Spec, exc: OSError, progress: RunProgress) -> disk_full.DiskFull:
        progress.done("LOST (disk-full)")
        disk_full.lost(_label(spec), f"its files could not be written: {exc.strerror}")
        return self.full()


def _keep_figures(run_dir: Path, kept: Path) -> None:
    """A probed script's saved plots (reprokit/kits/probe.py lists them in its result), beside the results."""
    figures = run_dir / "out" / "figures"
    if figures.is_dir():
        shutil.rmtree(kept, ignore_errors=True)
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(figures, kept)


def _one_at_a_time(runner: Runner, todo: Sequence[Spec], work: Path, ledger: Ledger, pool: Pool | None,
                   progress_for: Callable[[int, Spec], RunProgress], tally: _Tally,
                   gpus: tuple[str, ...] | None) -> bool:
    for i, spec in enumerate(todo):
        progress = progress_for(i, spec)
        slot = pool.take(held(spec)) if pool else None       # nothing else holds the pool: it fits
        try:
            result = run_placed(runner, spec, work, ledger, slot, progress, gpus)
        except OSError as exc:
            if not disk_full.is_full(exc):
                raise
            raise tally.could_not_start(spec, exc, progress) from None
        finally:
            if pool and slot:
                pool.give_back(slot)
        if result is None:
            return True
        tally.finished(result, progress)
    return False


def _side_by_side(runner: Runner, todo: Sequence[Spec], pool: Pool, work: Path, ledger_root: Path,
                  progress_for: Callable[[int, Spec], RunProgress], tally: _Tally) -> bool:
    """One child process per run at once, each in the slots its devices take; True when interrupted. The runs start
    round by round (device_placement.start_order), each once its slots are free, none overtaking a run before it:
    so a wide run is never kept waiting by narrower ones, and they go as the dry run placed them."""
    ctx = multiprocessing.get_context("spawn")
    queue = [(i, todo[i]) for i in start_order(todo, pool.slots, pool.at_once)]
    running: Running = {}                # connection -> (process, slot, progress)
    with contextlib.ExitStack() as children:
        try:
            while queue or running:
                while queue and (slot := pool.take(held(queue[0][1]))) is not None:
                    i, spec = queue.pop(0)
                    progress = progress_for(i, spec)
                    progress.label += f" · {slot.name}"
                    progress.tty = False     # several runs at once: lines, not one line rewritten in place
                    mine, theirs = ctx.Pipe(duplex=False)
                    proc = ctx.Process(target=_child, daemon=False,
                                       args=(runner, spec, work, ledger_root, slot, locks.command_line(), os.getpid(),
                                             theirs))
                    proc.start()
                    theirs.close()
                    # A second signal here stops at once: it reaches the child, which owns the kit's process group
                    children.enter_context(live.running(f"slot:{proc.pid}", functools.partial(_signal, proc)))
                    running[mine] = (proc, slot, progress, spec)
                for conn in cast("list[Connection]", wait(list(running))):    # wait() gives back what it was given
                    proc, slot, progress, spec = running[conn]
                    try:
                        kind, payload = conn.recv()
                    except EOFError:
                        proc.join()
                        del running[conn]
                        _stop(running, tally.after_full)
                        raise RuntimeError(f"a run's process ended with status {proc.exitcode} and no result") from None
                    if kind == "progress":
                        progress(payload)
                        continue
                    proc.join()
                    del running[conn]
                    pool.give_back(slot)
                    if kind == "disk-full":
                        full = tally.could_not_start(spec, OSError(errno.ENOSPC, payload), progress)
                        _stop(running, tally.after_full)
                        raise full
                    if kind == "user-error":
                        progress.done("stopped")
                        _stop(running, tally.after_full)
                        raise UserError(payload)
                    if payload is None:          # that run was interrupted: so are the others
                        _stop(running, tally.after_full)
                        return True
                    try:
                        tally.finished(payload, progress)
                    except disk_full.DiskFull:
                        _stop(running, tally.after_full)
                        raise
        except KeyboardInterrupt:
            _stop(running, tally.after_full)
            return True
    return False


def _signal(proc: SpawnProcess) -> None:
    if proc.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)


def _stop(running: Running, finished: Finished) -> None:
    """Pass the signal on to every run still going, keep any that ends with a result, wait for the rest."""
    for proc, _, _, _ in running.values():
        if proc.is_alive():
            _signal(proc)
    deadline = time.monotonic() + STOP_GRACE_S
    while running and time.monotonic() < deadline:
        for conn in cast("list[Connection]", wait(list(running), timeout=max(0.0, deadline - time.monotonic()))):
            proc, slot, progress, _ = running[conn]
            try:
                kind, payload = conn.recv()
            except EOFError:
                kind, payload = "result", None
            if kind != "progress":
                del running[conn]
                proc.join(5)
                if kind == "result" and payload is not None:
                    finished(payload, progress)
    for proc, _, _, _ in running.values():
        proc.kill()

"""A process the script started, watched as the script's own: attached at its start, its result left at its end.

``attach`` runs from ``sitecustomize`` (reprokit/kits/ranks/site/) in a new Python process: a launcher's rank or a
spawned worker. ``forked`` runs in a forked child, which inherits its parent's hooks: it gets an observer of its own at
its first observed call (a DataLoader's worker, which never makes one, costs nothing). Either way the process:

- dies with the process that started it (no process outlives its run);
- leaves its result in the session's folder when it ends, if it stepped an optimizer: its own figures and who
  it was (rank r of a process group, worker k, or the one process), read then;
- leaves its error instead where it raised: its exception, and the file and line in the script's own code;
- ends cleanly where the probe's bound stops a loop without a loader (StopScript), as its siblings do at the same
  step, so that no rank waits for it in a collective.
"""
from __future__ import annotations

import atexit
import json
import multiprocessing
import multiprocessing.process
import multiprocessing.util
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from reprokit.kits.contract.files import write_json_atomic
from reprokit.kits.contract.spec import ScriptSpec
from reprokit.kits.devices import stand_ins
from reprokit.kits.framework_free.measure import process_age_s
from reprokit.kits.framework_free.parent_death import arm
from reprokit.kits.measurement.phases import WARMUP
from reprokit.kits.observation.observe import StopScript
from reprokit.kits.ranks import certified, hang
from reprokit.kits.ranks import watch as watching
from reprokit.kits.ranks.identity import start_time, who
from reprokit.kits.ranks.watch import Watch

SESSION_ENV = "REPROKIT_PROBE_SESSION"
SESSION_NAME = "session.json"
STARTED = ".started"                  # a marker per process the probe attached to: its pid, its start time


class _State:
    watch: Watch | None = None
    folder: Path | None = None
    failure: dict[str, Any] | None = None
    written = False
    inherited = False            # a forked child whose observer is still its parent's
    deadline = 0.0               # when a forked child writes its stack (reprokit/kits/ranks/hang.py)


# multiprocessing's own helper that a spawned child starts (it never runs the script's code): not watched
HELPERS = ("multiprocessing.resource_tracker",)


def attach() -> None:
    """A new Python process of the script: watched from its first line, its result left when it ends."""
    if any(helper in " ".join(sys.orig_argv) for helper in HELPERS):
        return
    session = json.loads(Path(os.environ[SESSION_ENV]).read_text())
    try:
        _attach(session)
    except Exception as exc:     # the run fails saying so, where the process would run unobserved
        rank = os.environ.get("RANK")
        result = watching.failed(ScriptSpec.from_dict(session["spec"]), f"could not be watched: the probe failed to "
                                 f"attach there: {type(exc).__name__}: {exc}", [])
        result["process"] = {"pid": os.getpid(), "parent": os.getppid(), "role": "rank" if rank else "worker",
                             "index": int(rank) if rank else os.getpid()}
        write_json_atomic(Path(session["folder"]) / f"{os.getpid()}.json", result)
        raise


def _attach(session: dict[str, Any]) -> None:
    arm(os.getppid())
    started = time.perf_counter() - process_age_s()
    requirements = Path(session["requirements"]) if session["requirements"] else None
    w = watching.start(session["spec"], Path(session["data_dir"]), Path(session["work"]), requirements, started)
    w.shims += stand_ins.after_import(w.spec.framework, w.spec.device, Path(session["work"]))    # no CUDA on a CPU run
    w.phases.start(WARMUP)
    folder = Path(session["folder"])
    if session.get("certify"):        # under --certify: this process too stops after its first step
        given = session["certify"]["weights_from"]
        certified.arm(w, Path(session["certify"]["folder"]), Path(given) if given else None)
    _watching(w, folder)
    _started(folder)
    hang.arm(folder, session["deadline"])
    w.observer.at_first_step.append(lambda: hang.who(folder, who(w)))
    atexit.register(_leave)
    real_hook = sys.excepthook

    def excepthook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        if isinstance(exc, StopScript):       # the probe's bound on a loop without a loader: a clean end
            _leave()
            os._exit(0)
        _failed(exc)
        _leave()
        real_hook(kind, exc, tb)
    sys.excepthook = excepthook


def forked(w: Watch, folder: Path, deadline: float) -> None:
    """In a forked child: its own observer at its first observed call, its result left at its end."""
    _State.written, _State.failure, _State.inherited, _State.deadline = False, None, True, deadline
    w.probe.observer = _Renewed(w)          # type: ignore[attr-defined]
    _watching(w, folder)


class _Renewed:
    """Stands in for a forked child's observer until the child's first observed call makes its own (a loader's
    worker never calls one)."""

    def __init__(self, w: Watch) -> None:
        self._watch = w

    def __getattr__(self, name: str) -> Any:
        w, folder = self._watch, _State.folder
        watching.renew(w)
        _State.inherited = False
        if folder is not None:
            _started(folder)
            hang.arm(folder, _State.deadline)
            w.observer.at_first_step.append(lambda: hang.who(folder, who(w)))
        return getattr(w.observer, name)


def _watching(w: Watch, folder: Path) -> None:
    _State.watch, _State.folder = w, folder
    # multiprocessing's children end through os._exit after their finalizers: atexit would not run there
    multiprocessing.util.Finalize(None, _leave, exitpriority=100)
    _wrap_process_run()


def _wrap_process_run() -> None:
    """multiprocessing's Process.run: an error a worker raises is its result (its parent may go on and test the
    model); the probe's bound ends it cleanly."""
    base = multiprocessing.process.BaseProcess
    if getattr(base.run, "watched", False):
        return
    real = base.run

    def run(self: multiprocessing.process.BaseProcess) -> None:
        try:
            real(self)
        except StopScript:
            _leave()
            os._exit(0)
        except SystemExit:
            raise
        except BaseException as exc:
            _failed(exc)
            raise
    run.watched = True                   # type: ignore[attr-defined]
    base.run = run                        # type: ignore[method-assign]


def _started(folder: Path) -> None:
    """The marker of a process the probe watches: its pid, and its start time (what tells it from a later process
    that reuses the pid)."""
    (folder / f"{os.getpid()}{STARTED}").write_text(start_time(os.getpid()))


def _failed(exc: BaseException) -> None:
    w = _State.watch
    if w is None or _State.failure is not None:
        return
    where = _where(exc, str(Path(w.probe.script_dir)))       # type: ignore[attr-defined]
    tail = "".join(traceback.format_exception(exc)).splitlines()[-40:]
    message = f"raised {type(exc).__name__}: {exc}{where}"
    if w.tried:
        message = f"{watching.NO_NETWORK} (it tried to reach {w.tried[0]})"
    _State.failure = {"kind": "error", "message": message, "log_tail": tail, "at": time.time()}


def _where(exc: BaseException, script_dir: str) -> str:
    """", in train.py, line 42": the deepest frame in the script's own files, else the deepest of all."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if f.filename.startswith(script_dir)] or frames
    if not own:
        return ""
    frame = own[-1]
    name = os.path.relpath(frame.filename, script_dir) if frame.filename.startswith(script_dir) else frame.filename
    return f", in {name}, line {frame.lineno}"


def _leave() -> None:
    """This process's result, or its error, in the session's folder (once); nothing where it neither trained nor
    failed (a loader's worker, a launcher's agent)."""
    w, folder = _State.watch, _State.folder
    if _State.written or w is None or folder is None:
        return
    _State.written = True
    if _State.inherited:
        return                              # a forked child that never made an observed call
    if _State.failure is None and not w.observer.steps:
        return
    try:
        result = (watching.failed(w.spec, "", w.tried) | {"failure": _State.failure} if _State.failure
                  else watching.outcome(w, None))
    except Exception as exc:    # noqa: BLE001 - the probe's own error in this process is its result
        result = watching.failed(w.spec, f"the probe failed in this process: {type(exc).__name__}: {exc}", w.tried)
    result["process"] = who(w)
    write_json_atomic(folder / f"{os.getpid()}.json", result)


_TRACEBACK_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def spawned_error(exc: BaseException, folder: Path, script_dir: str) -> str | None:
    """The one sentence for an error that a process ``mp.spawn`` started raised, which its parent re-raises with the
    child's traceback as text (torch's ProcessRaisedException): who it was, its error, its file and line."""
    pid, text = getattr(exc, "error_pid", None), str(exc)
    if pid is None or "Traceback" not in text:
        return None
    lines = [line for line in text.strip().splitlines() if line.strip()]
    frames = [m for m in map(_TRACEBACK_FRAME.search, lines) if m]
    own = [m for m in frames if m["file"].startswith(script_dir)] or frames
    where = f", in {os.path.relpath(own[-1]['file'], script_dir)}, line {own[-1]['line']}" if own else ""
    known = folder / f"{pid}{hang.WHO}"
    ident = json.loads(known.read_text()) if known.exists() else {"role": "process", "index": getattr(
        exc, "error_index", "?")}
    name = f"{ident['role']} {ident['index']}" if ident["role"] in ("rank", "worker") else \
        f"process {ident['index']} of mp.spawn"
    return f"{name} raised {lines[-1]}{where}"

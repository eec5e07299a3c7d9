"""A run that has not ended by its deadline: where each of its processes is, and who hangs, in one sentence.

Every process the probe watches arms ``faulthandler`` to write its threads' stacks at the run's deadline (its time
limit, less a margin that leaves time to say so before the runner stops it), and says who it is once it trains
(``who``). At the deadline the script's own process reads them: a process whose innermost frame is in a
collective (torch.distributed's, a barrier) waits for another; the others hang, and the failure names the first
of them, the call it is in and the script's line that called it, with its stack. Then every process of the run
ends: no rank is left waiting.
"""
from __future__ import annotations

import faulthandler
import json
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

MARGIN_S = 20.0                        # before the runner's own limit: time to read the stacks and write the result
STACK, WHO = ".stack", ".who"
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
# where a process waits for another: a collective (DDP's own synchronisations too), a join, a queue
_WAITS = ("torch/distributed/", "torch/nn/parallel/distributed.py", "/gloo", "barrier", "all_reduce", "allreduce",
          "all_gather", "broadcast", "multiprocessing/connection.py", "multiprocessing/popen_", "threading.py",
          "queues.py", "torch/multiprocessing/spawn.py", "tensorflow/python/distribute/", "jax/_src/distributed")
_kept: list[TextIO] = []               # the open stack files: faulthandler writes to their descriptors


def deadline(started_wall: float, timeout_s: float) -> float:
    """The wall-clock time at which the run's processes write their stacks."""
    return started_wall + max(timeout_s - MARGIN_S, timeout_s * 0.5)


def arm(folder: Path, at: float) -> None:
    """This process writes every thread's stack into the folder at ``at`` (if it still runs then)."""
    if at - time.time() <= 0:
        return
    stack = (folder / f"{os.getpid()}{STACK}").open("w")
    _kept.append(stack)
    faulthandler.dump_traceback_later(at - time.time(), repeat=False, file=stack)


def who(folder: Path, identity: dict[str, Any]) -> None:
    """Who this process is, written once it trains, with its main thread's id (which its stack names)."""
    (folder / f"{os.getpid()}{WHO}").write_text(json.dumps({**identity, "thread": threading.main_thread().ident}))


def watchdog(at: float, on_deadline: Callable[[], None]) -> threading.Timer:
    """``on_deadline()`` in this process a moment after the stacks are written, unless cancelled first."""
    timer = threading.Timer(max(0.0, at - time.time()) + 2.0, on_deadline)
    timer.daemon = True
    timer.start()
    return timer


def _main_frames(text: str, thread: int | None) -> list[dict[str, Any]]:
    """The frames of the process's main thread, innermost first, from faulthandler's text."""
    text = re.sub(r"^Timeout \([^)]*\)!\n", "", text.strip())        # dump_traceback_later's first line
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text)
    chosen = next((b for b in blocks if thread is not None and f"0x{thread:016x}" in b.splitlines()[0]), None)
    lines = (chosen or (blocks[-1] if blocks else "")).splitlines()[1:]
    return [m.groupdict() for m in map(_FRAME.match, lines) if m]


def _waits(frames: list[dict[str, Any]]) -> bool:
    return bool(frames) and any(mark in f"{frames[0]['file']} {frames[0]['func']}" for mark in _WAITS)


def explain(folder: Path, script_dir: str, limit_s: float) -> dict[str, Any] | None:
    """The failure of a run that hangs: who hangs, where, and its stack; None where no process wrote one."""
    seen = []
    for path in sorted(folder.glob(f"*{STACK}")):
        text = path.read_text()
        if not text.strip():
            continue
        pid = path.name.removesuffix(STACK)
        ident_path = folder / f"{pid}{WHO}"
        ident = json.loads(ident_path.read_text()) if ident_path.exists() else {"role": "process", "pid": int(pid)}
        seen.append((ident, _main_frames(text, ident.get("thread")), text))
    if not seen:
        return None
    hanging = [s for s in seen if not _waits(s[1])] or seen
    ident, frames, text = min(hanging, key=lambda s: (s[0].get("role") != "rank", s[0].get("index") or 0))
    name = (f"{ident['role']} {ident['index']}" if ident.get("role") in ("rank", "worker") else
            "the script's process")
    call = f"{frames[0]['func']} ({frames[0]['file']}, line {frames[0]['line']})" if frames else "a call"
    own = next((f for f in frames if f["file"].startswith(script_dir)), None)
    mine = f", called from {os.path.relpath(own['file'], script_dir)} line {own['line']}" if own else ""
    waiting = [s for s in seen if s is not (ident, frames, text) and _waits(s[1])]
    others = (f"; {len(waiting)} other process(es) wait for it in a collective or a join" if waiting else "")
    return {"kind": "timeout",
            "message": f"{name} had not ended after {limit_s:.0f} s: it is in {call}{mine}{others}; its stack is "
                       f"below, and every process of the run was stopped",
            "log_tail": text.strip().splitlines()[-40:]}

"""The script's own process follows the script into every process it starts, and gathers what they leave.

Two ways a process of the script begins, each watched as the script's own process is (reprokit/kits/ranks/watch.py):

- a new Python process (a launcher's rank, ``multiprocessing``'s spawn and forkserver, ``mp.spawn``, a
  trainer's ranks): this package's ``site/`` folder is first on the PYTHONPATH every such process inherits, and
  its ``sitecustomize`` attaches the probe there before the process's first line (reprokit/kits/ranks/process.py), from
  the session file this module writes;
- a forked process (``multiprocessing``'s fork, a DataLoader's workers): it inherits the hooks, and a new
  observer of its own replaces its parent's at its first observed call.

Each process that stepped an optimizer leaves its result in the session's folder when it ends; one that raised
leaves its error. After the script, ``gathered`` reads them, and ``end`` stops any process the script left
behind: no process outlives its run.
"""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from reprokit.kits.contract.files import write_json_atomic
from reprokit.kits.ranks import hang, process
from reprokit.kits.ranks.identity import start_time, who
from reprokit.kits.ranks.watch import Watch

SESSION_ENV = process.SESSION_ENV
SITE = Path(__file__).resolve().parent / "site"
FOLDER = "processes"                  # beside the result: the session file, and one result per process


def follow(watch: Watch, data_dir: Path, work: Path, requirements: Path | None, out_dir: Path,
           deadline: float, certify: dict[str, Any] | None = None) -> list[str]:
    """Every process the script starts from now on is watched, and writes its stack at ``deadline`` if it still
    runs then (reprokit/kits/ranks/hang.py); returns the declaration."""
    folder = out_dir / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    session = {"spec": watch.raw, "data_dir": str(data_dir), "work": str(work),
               "requirements": str(requirements) if requirements else None, "folder": str(folder),
               "owner": os.getpid(), "deadline": deadline, "certify": certify}
    write_json_atomic(folder / process.SESSION_NAME, session)
    os.environ[SESSION_ENV] = str(folder / process.SESSION_NAME)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SITE), *paths])
    os.register_at_fork(after_in_child=lambda: process.forked(watch, folder, deadline))
    hang.arm(folder, deadline)
    watch.observer.at_first_step.append(lambda: hang.who(folder, who(watch)))
    return ["the probe follows the script into every process it starts (a launcher's ranks, multiprocessing's "
            "spawned and forked workers): each is observed and bounded as the script's own process is, and leaves "
            "its own result; no process outlives the run"]


def gathered(out_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """The results the followed processes left, and how many processes the probe attached to in all."""
    folder = out_dir / FOLDER
    results = []
    for path in sorted(folder.glob("*.json")):
        if path.name == process.SESSION_NAME:
            continue
        try:
            results.append(json.loads(path.read_text()))
        except (OSError, ValueError):       # a process killed while it wrote: its partial file is not a result
            continue
    return results, len(list(folder.glob(f"*{process.STARTED}")))


def end(out_dir: Path) -> list[int]:
    """Stop every process the probe attached to that still runs once the script is done (a launcher's worker that
    started a session of its own, a daemon the script never joined); the pids stopped."""
    stopped = []
    for marker in (out_dir / FOLDER).glob(f"*{process.STARTED}"):
        pid = int(marker.name.removesuffix(process.STARTED))
        if pid != os.getpid() and _alive(pid) and start_time(pid) == marker.read_text():
            try:
                os.kill(pid, signal.SIGKILL)
                stopped.append(pid)
            except ProcessLookupError:
                pass
    return stopped


def _alive(pid: int) -> bool:
    """Running, not a zombie its parent has yet to reap."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"

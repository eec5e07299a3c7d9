"""Who a process of the script is: rank r of a process group, worker k of multiprocessing's, or the one process.

Read from the framework (its process group, at the first step), the launcher's environment (RANK) and
multiprocessing (the k-th child its parent started).
"""
from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

from reprokit.kits.ranks.watch import Watch


def who(w: Watch) -> dict[str, Any]:
    """Who this process was: rank r of a process group, worker k of multiprocessing's, or the one process."""
    group = getattr(w.probe, "group", None) or {}
    rank = group.get("rank", os.environ.get("RANK"))
    out: dict[str, Any] = {"pid": os.getpid(), "parent": os.getppid(), "backend": group.get("backend"),
                           "replicas": getattr(w.probe, "replicas", lambda: None)()}
    if rank is not None:
        return out | {"role": "rank", "index": int(rank),
                      "ranks": int(group.get("ranks", os.environ.get("WORLD_SIZE", 0)) or 0) or None}
    if multiprocessing.parent_process() is not None:
        own = multiprocessing.current_process()._identity       # (k,) for the k-th child its parent started
        return out | {"role": "worker", "index": own[-1] if own else os.getpid()}
    return out | {"role": "process", "index": 0}


def start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid, what tells
    this process from a later one that reuses its pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""

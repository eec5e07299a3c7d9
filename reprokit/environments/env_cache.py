"""`reprokit cache list|prune`: what the per-user cache holds, and removing the environments no command needs.

An environment is in use while a command builds it (its lock is held) or runs its python (a live process whose
executable lies in its folder: the envs' pythons are copies, not links). prune never removes one in use.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from reprokit.environments import cache, envs
from reprokit.locking import Lock, holder_text
from reprokit.results.provenance import sha256_file

FOLDER = re.compile(r"^(?P<lock>.+)-(?P<sha12>[0-9a-f]{12})-(?P<python>py\d+)$")
DAY = 86400.0


@dataclass(frozen=True)
class Entry:
    folder: Path
    lock: str                  # the lock file's name in locks/, without .txt
    size: int
    last_used: float           # seconds since the epoch
    complete: bool
    lock_current: bool         # locks/<lock>.txt is the one it was built from
    users: tuple[str, ...]     # who uses it now: "pid 42 builds it", "pid 43 runs its python"


def entries(root: Path) -> list[Entry]:
    """Every environment folder in the cache, by name."""
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(root.iterdir()):
        match = FOLDER.match(folder.name)
        if not match or not folder.is_dir():
            continue                # a build's lock file, the quarantine
        lock = envs.LOCKS / f"{match['lock']}.txt"
        builder = _builder(folder)
        users = ([f"{holder_text(builder)} builds it"] if builder else []) + _running(folder)
        found.append(Entry(folder, match["lock"], envs.size_bytes(folder), _last_used(folder),
                           isinstance(envs.read_marker(folder), dict),
                           lock.exists() and sha256_file(lock)[:12] == match["sha12"], tuple(users)))
    return found


def _last_used(folder: Path) -> float:
    for path in (folder / envs.LAST_USED, folder / envs.COMPLETE, folder):
        try:
            return path.stat().st_mtime
        except FileNotFoundError:
            continue
    return 0.0


def _running(folder: Path) -> list[str]:
    """The live processes whose executable is the env's python: "pid 43 runs its python"."""
    prefix = str(folder) + os.sep
    found = []
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int) if os.path.isdir("/proc") else []:
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue                # gone meanwhile, or another user's
        if exe.startswith(prefix):
            found.append(f"pid {pid} runs its python")
    return found


def _builder(folder: Path) -> dict[str, object] | None:
    """The record of the process that holds the env's build lock, None if none does."""
    lock_path = envs.lock_file(folder)
    if not lock_path.exists():
        return None
    lock = Lock(lock_path, f"the environment {folder.name}")
    holder = lock.try_acquire()
    lock.release()
    return holder


def list_text(root: Path) -> str:
    """`reprokit cache list`: each environment with its size, last use and whether it is in use; the certificates."""
    found = entries(root)
    lines = [f"environments in {root} (REPROKIT_CACHE moves the cache):" if found else
             f"no environments in {root} yet: a local run builds them there (REPROKIT_CACHE moves the cache)"]
    width = max((len(e.folder.name) for e in found), default=0)
    for e in found:
        state = ("in use: " + "; ".join(e.users)) if e.users else "not in use"
        notes = [note for note, shown in (("half-built", not e.complete),
                                          (f"locks/{e.lock}.txt has changed or is gone", not e.lock_current)) if shown]
        lines.append(f"  {e.folder.name:<{width}}  {envs.shown_size(e.size):>7}  last used {_ago(e.last_used)}, {state}"
                     + "".join(f"; {note}" for note in notes))
    certificates = cache.root() / "certificates"
    if certificates.is_dir():
        count, size = sum(1 for _ in certificates.iterdir()), envs.size_bytes(certificates)
        lines.append(f"certificates in {certificates}: {count} entr{'y' if count == 1 else 'ies'}, "
                     f"{envs.shown_size(size)}")
    if found:
        total = envs.shown_size(sum(e.size for e in found))
        lines.append(f"{len(found)} environment{'s' * (len(found) > 1)}, {total}; "
                     f"`reprokit cache prune` removes those no command needs")
    return "\n".join(lines)


def prune(root: Path, unused_days: float) -> str:
    """`reprokit cache prune`: remove the environments whose lock file is no longer in locks/, the half-built ones and
    those no command used for unused_days; never one in use. Says what it removed and the space freed."""
    lines = []
    freed = 0
    found = entries(root)
    for e in found:
        why = _why_remove(e, unused_days)
        if why is None:
            continue
        lock = Lock(envs.lock_file(e.folder), f"the environment {e.folder.name}")
        holder = lock.try_acquire()     # held while it is removed: no build starts in the folder meanwhile
        users = [f"{holder_text(holder)} builds it"] if holder else _running(e.folder)
        if users:
            lines.append(f"kept {e.folder.name} ({why}): it is in use, {'; '.join(users)}")
            lock.release()
            continue
        try:
            (e.folder / envs.COMPLETE).unlink(missing_ok=True)     # not ready from here on, to any command
            shutil.rmtree(e.folder)
        finally:
            lock.release()
        freed += e.size
        lines.append(f"removed {e.folder.name} ({why}): {envs.shown_size(e.size)}")
    if not found:
        return f"nothing to remove in {root}: it holds no environments"
    if not lines:
        return (f"nothing to remove in {root}: every environment's lock file is in locks/, and each was used "
                f"in the last {unused_days:g} days")
    return "\n".join([*lines, f"freed {envs.shown_size(freed)} in {root}"])


def _why_remove(e: Entry, unused_days: float) -> str | None:
    if not e.lock_current:
        return f"locks/{e.lock}.txt has changed or is gone"
    if not e.complete:
        return "half-built"
    idle = (time.time() - e.last_used) / DAY
    if idle >= unused_days:
        return f"not used for {idle:.0f} days"
    return None


def _ago(when: float) -> str:
    days = (time.time() - when) / DAY
    if days < 1:
        return "today"
    return "yesterday" if days < 2 else f"{days:.0f} days ago"

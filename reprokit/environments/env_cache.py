"""`reprokit cache list|prune`: what the per-user cache holds, and removing what no command needs: the kit
environments, the scripts' installed requirement sets and their wheels (reprokit/environments/requirement_sets.py).

An environment is in use while a command builds it (its lock is held) or runs its python (a live process whose
executable lies in its folder: the envs' pythons are copies, not links); a requirement set, while a command
installs it or a live process names its folder (the probe is given it). prune never removes one in use, nor a
wheel while wheels arrive.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from reprokit import resources
from reprokit.environments import cache, envs, requirement_sets
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
    return _holder(Lock(envs.lock_file(folder), f"the environment {folder.name}"))


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
    return "\n".join(lines + _sets_text())


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
    if lines:
        lines.append(f"freed {envs.shown_size(freed)} in {root}")
    more, freed_more = _prune_sets(unused_days)
    if more:
        return "\n".join([*lines, *more, f"freed {envs.shown_size(freed_more)} of requirement sets and wheels in "
                                           f"{cache.root()}"])
    if lines:
        return "\n".join(lines)
    also = (f"; every requirement set and wheel in {cache.root()} was used in the last {unused_days:g} days"
            if set_entries() or _wheels() else "")
    if not found:
        return f"nothing to remove in {root}: it holds no environments{also}"
    return (f"nothing to remove in {root}: every environment's lock file is in locks/, and each was used "
            f"in the last {unused_days:g} days{also}")


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


@dataclass(frozen=True)
class SetEntry:
    """An installed requirement set of a script (reprokit/environments/requirement_sets.py)."""
    folder: Path
    size: int
    last_used: float
    complete: bool
    lock_current: bool         # the lock it was resolved beside is unchanged (or its given interpreter is there)
    users: tuple[str, ...]     # "pid 42 installs it", "pid 43 runs with it"
    lines: tuple[str, ...]     # its hash-pinned lines
    wheels: tuple[str, ...]    # the wheels it was installed from


def set_entries() -> list[SetEntry]:
    """Every requirement set's folder in the cache, by name."""
    root = requirement_sets.sets_folder()
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        marker = requirement_sets.marker(folder) or {}
        lock, interpreter = marker.get("lock"), marker.get("interpreter") or ""
        held = resources.root() / lock if lock else None        # the set's lock file, named as a result names it
        current = ((held.is_file() and sha256_file(held) == marker.get("lock_sha256")) if held
                   else bool(interpreter) and Path(interpreter).exists())
        builder = _holder(requirement_sets.set_lock(folder))
        users = ([f"{holder_text(builder)} installs it"] if builder else []) + _naming(folder)
        found.append(SetEntry(folder, envs.size_bytes(folder), _last_used(folder),
                              requirement_sets.ready(folder), current, tuple(users),
                              tuple(marker.get("install", ())), tuple(marker.get("wheels", ()))))
    return found


def _holder(lock: Lock) -> dict[str, object] | None:
    """The record of the process that holds the lock, None if none does (or its file is not there yet)."""
    if not lock.path.exists():
        return None
    holder = lock.try_acquire()
    lock.release()
    return holder


def _naming(folder: Path) -> list[str]:
    """The live processes whose command line names the set's folder (a run, which the probe is given it for)."""
    found = []
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int) if os.path.isdir("/proc") else []:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                named = str(folder).encode() in fh.read().split(b"\0")
        except OSError:
            continue                # gone meanwhile, or another user's
        if named:
            found.append(f"pid {pid} runs with it")
    return found


def _wheels() -> list[Path]:
    return sorted(requirement_sets.wheels_folder().glob("*.whl"))


def _sets_text() -> list[str]:
    """`reprokit cache list`'s lines on the scripts' requirement sets and the wheels they were installed from."""
    sets, wheels = set_entries(), _wheels()
    lines = [f"requirement sets in {requirement_sets.sets_folder()} (installed once, read by every run of them):"
             ] if sets else []
    width = max((len(e.folder.name) for e in sets), default=0)
    for e in sets:
        state = ("in use: " + "; ".join(e.users)) if e.users else "not in use"
        first = f"{e.lines[0].split()[0]}" + (f" and {len(e.lines) - 1} more" if len(e.lines) > 1 else "") \
            if e.lines else "no lines"
        notes = [note for note, shown in (("half-installed", not e.complete),
                                          ("its lock has changed or is gone", e.complete and not e.lock_current))
                 if shown]
        lines.append(f"  {e.folder.name:<{width}}  {envs.shown_size(e.size):>7}  {first}; last used "
                     f"{_ago(e.last_used)}, {state}" + "".join(f"; {note}" for note in notes))
    if sets:            # a package two sets install from one wheel is linked, not copied (requirement_sets._share)
        lines.append(f"{len(sets)} requirement set{'s' * (len(sets) > 1)}, "
                     f"{envs.shown_size(envs.size_bytes(requirement_sets.sets_folder()))} on disk (a file two sets "
                     f"share counted once)")
    if wheels:
        named = {name for e in sets for name in e.wheels}
        size = sum(w.stat().st_blocks * 512 for w in wheels)
        loose = sum(w.name not in named for w in wheels)
        lines.append(f"wheels in {requirement_sets.wheels_folder()}: {len(wheels)} file{'s' * (len(wheels) > 1)}, "
                     f"{envs.shown_size(size)}" + (f" ({loose} that no installed set uses)" if loose else ""))
    return lines


def _prune_sets(unused_days: float) -> tuple[list[str], int]:
    """The requirement sets that are half-installed, whose lock has changed or that no command used for
    unused_days, removed (never one in use); then the wheels no remaining set uses and no command used for
    unused_days. Says what it removed, and the bytes freed."""
    lines, freed = [], 0
    kept: set[str] = set()
    for e in set_entries():
        why = _why_remove_set(e, unused_days)
        if why is None:
            kept.update(e.wheels)
            continue
        lock = requirement_sets.set_lock(e.folder)
        holder = lock.try_acquire()      # held while it is removed: no install starts in the folder meanwhile
        users = [f"{holder_text(holder)} installs it"] if holder else _naming(e.folder)
        try:
            if users:
                lines.append(f"kept {e.folder.name} ({why}): it is in use, {'; '.join(users)}")
                kept.update(e.wheels)
                continue
            requirement_sets.remove(e.folder)
        finally:
            lock.release()
        freed += e.size
        lines.append(f"removed the requirement set {e.folder.name} ({why}): {envs.shown_size(e.size)}")
    lock = requirement_sets.wheels_lock()
    if lock.try_acquire() is not None:
        return [*lines, "kept every wheel: a command is downloading wheels now"], freed
    try:
        gone = [w for w in _wheels() if w.name not in kept and (time.time() - w.stat().st_atime) / DAY >= unused_days]
        for wheel in gone:
            freed += wheel.stat().st_blocks * 512
            wheel.unlink()
    finally:
        lock.release()
    if gone:
        lines.append(f"removed {len(gone)} wheel{'s' * (len(gone) > 1)} that no installed set uses, none used for "
                     f"{unused_days:g} days")
    return lines, freed


def _why_remove_set(e: SetEntry, unused_days: float) -> str | None:
    if not e.complete:
        return "half-installed"
    if not e.lock_current:
        return "its lock has changed or is gone"
    idle = (time.time() - e.last_used) / DAY
    return f"not used for {idle:.0f} days" if idle >= unused_days else None

"""Who may time runs now: one command per state folder, one timed run per device on this host, each a
reprokit.locking.Lock (flock: never held by a process that is gone)."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reprokit.errors import UserError
from reprokit.locking import Lock, Say, holder_text, took_over
from reprokit.locking import command_line as command_line  # these three re-exported: execute's callers use them
from reprokit.locking import on_behalf_of as on_behalf_of
from reprokit.locking import release_all as release_all

LOCK_DIR_ENV = "REPROKIT_LOCK_DIR"            # tests point it at a folder of their own
DEFAULT_LOCK_DIR = Path("/tmp/reprokit-locks")


def lock_dir() -> Path:
    """The host-wide folder of device locks, open to every user (1777, as /tmp) so that any user's commands meet."""
    folder = Path(os.environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):      # made by another user meanwhile: theirs to set
            os.chmod(folder, 0o1777)
    return folder


@contextlib.contextmanager
def state_folder(state_dir: Path, wait: bool, say: Say = print) -> Iterator[None]:
    """The state folder for one command: a second command on it refuses in one sentence, or with --wait waits."""
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = Lock(state_dir / "command.lock", f"the state folder {state_dir}")
    if wait:
        lock.acquire(say)
    elif (holder := lock.try_acquire()) is not None:
        raise UserError(f"another command is using the state folder {state_dir}: {holder_text(holder)}; wait for "
                        f"it to end, or add --wait to start this one when it does.")
    if lock.gone is not None:
        took_over(lock.what, lock.gone)
    try:
        yield
    finally:
        lock.release()


def device_key(device: str) -> str:
    """A lock file's name for a device: "cpu3", or a GPU's (or MIG device's) UUID."""
    return "device-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in device) + ".lock"


@contextlib.contextmanager
def devices(names: list[str], say: Say = print) -> Iterator[None]:
    """Every device of one timed run ("cpu3", a GPU's UUID), taken in one order (sorted) so that two commands never
    wait on each other."""
    folder = lock_dir()
    held: list[Lock] = []
    said: list[str] = []

    def once(text: str) -> None:              # a run waiting for all of a host's CPUs says so once, not per CPU
        if not said:
            said.append(text)
            say(text)
    try:
        for name in sorted(set(names)):
            what = f"CPU {name[3:]}" if name.startswith("cpu") else f"GPU {name}"
            lock = Lock(folder / device_key(name), what, 0o666)
            lock.acquire(once)
            held.append(lock)
        gone: dict[tuple[Any, Any], list[str]] = {}
        for lock in held:                     # one line per holder that died, not one per CPU
            if lock.gone is not None:
                gone.setdefault((lock.gone.get("pid"), lock.gone.get("command")), []).append(lock.what)
        for (pid, cmd), whats in gone.items():
            took_over(", ".join(whats), {"pid": pid, "command": cmd})
        yield
    finally:
        for lock in reversed(held):
            lock.release()

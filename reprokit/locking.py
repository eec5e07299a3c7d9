"""A lock between processes: one file held with ``flock``, which the kernel releases when its process dies
however it dies, so a lock is never held by a process that is gone.

The file itself holds the holder's record (its pid, its command, since when), written once it holds the
lock and emptied as it lets go: a record found by the next holder names a holder that died without
letting go. One file, not a record beside it, because in a host-wide folder (sticky, like /tmp) a file of
another user can be written through but not replaced. The device and state-folder locks
(reprokit/execute/locks.py) and the environment builds (reprokit/environments/envs.py) use it.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Say = Callable[[str], object]


_command: str | None = None       # a --parallel slot's process records its parent's command, not its own


def command_line() -> str:
    """The command as it was typed (the interpreter and -m included): what to run again."""
    return _command or shlex.join(sys.orig_argv)


def on_behalf_of(command: str) -> None:
    """This process works for that command (a --parallel slot's process): its locks name it."""
    global _command
    _command = command


_held: set[Lock] = set()


def release_all() -> None:
    """Let go of every lock this process holds (a second Ctrl-C, which exits at once)."""
    for lock in list(_held):
        lock.release()


def holder_text(record: dict[str, Any]) -> str:
    """ "pid 4242 (`python -m reprokit reproduce ...`, since 22:04:11)" """
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.get("since", 0)))
    return f"pid {record.get('pid')} (`{_short(record)}`, since {since})"


def _short(record: dict[str, Any], limit: int = 160) -> str:
    """The holder's command, cut to a line (a Ray worker's runs to a screenful, a `python -c` script to several)."""
    command = " ".join(str(record.get("command", "an unknown command")).split())
    return command if len(command) <= limit else command[:limit - 1] + "…"


class Lock:
    """One lock file, held by this process from acquire() until release()."""

    def __init__(self, path: Path, what: str, mode: int = 0o644) -> None:
        self.path = path
        self.what = what                      # "the state folder /x", "CPU 3", "GPU GPU-1234..."
        self.mode = mode                      # 0o666 in the host-wide folder: any user's command takes it
        self.gone: dict[str, Any] | None = None   # the record of a holder that died holding it, once taken
        self._fd: int | None = None

    def try_acquire(self) -> dict[str, Any] | None:
        """Take it if it is free (None); else the record of who holds it."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record = _record(fd, wait_s=1.0)
            os.close(fd)
            return record
        self._took(fd)
        return None

    def acquire(self, say: Say) -> None:
        """Take it, waiting for whoever holds it (said once, with who)."""
        holder = self.try_acquire()
        if holder is None:
            return
        say(f"waiting for {self.what}: {holder_text(holder)} holds it")
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)    # a signal's KeyboardInterrupt ends the wait
        except BaseException:
            os.close(fd)
            raise
        self._took(fd)

    def release(self) -> None:
        if self._fd is None:
            return
        _held.discard(self)
        os.ftruncate(self._fd, 0)             # an empty file: let go of, not left by a process that died
        os.close(self._fd)                    # closing drops the flock
        self._fd = None

    def _open(self) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, self.mode)
        with contextlib.suppress(PermissionError):      # another user's file: already open to all
            os.fchmod(fd, self.mode)                    # whatever the umask took away
        return fd

    def _took(self, fd: int) -> None:
        self.gone = _record(fd, wait_s=0.0)       # a record left in a free lock: its holder died holding it
        mine = json.dumps({"pid": os.getpid(), "command": command_line(), "since": time.time(), "what": self.what})
        os.ftruncate(fd, 0)
        os.pwrite(fd, mine.encode(), 0)
        self._fd = fd
        _held.add(self)


def took_over(what: str, gone: dict[str, Any]) -> None:
    print(f"{what}: took over the lock of pid {gone.get('pid')} (`{_short(gone)}`), "
          f"which is gone", file=sys.stderr)


def _record(fd: int, wait_s: float) -> dict[str, Any] | None:
    """The holder's record in the file, None if empty; a holder that just took the lock may not have written it
    yet, so an empty or half-written file is read again for up to wait_s."""
    deadline = time.monotonic() + wait_s
    while True:
        text = os.pread(fd, 65536, 0)
        try:
            found = json.loads(text) if text else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            found = {"pid": "unknown", "command": "a record that could not be read"}
        if isinstance(found, dict) or time.monotonic() >= deadline:
            return found if isinstance(found, dict) else None
        time.sleep(0.02)

"""Atomic writes: a reader never sees half a file, even after a crash.

Every write of the state and report folders goes through ``atomic_file``: the content goes to a
temporary file beside the target (named for its writer's process id), is flushed to disk, and is
renamed over the target; the folder is then flushed too, so that the rename itself survives a
power cut. A writer killed before the rename leaves the old file whole and a temporary that
``clean_stale`` removes once its process is gone.
"""
from __future__ import annotations

import errno
import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

TMP_SUFFIX = ".tmp"
# .<target name>.<writer's pid>.<random>.tmp, as atomic_file names its temporaries
_TEMPORARY = re.compile(r"^\..+\.(\d+)\.[^.]+\.tmp$")


@contextmanager
def atomic_file(path: str | Path, mode: str = "w", newline: str | None = None) -> Iterator[IO[Any]]:
    """A file that appears at path only once it is complete, readable by all (0644) like any
    other file: a container user other than the writer must be able to read data and results."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, mode, newline=newline) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> None:
    with atomic_file(path) as fh:
        json.dump(data, fh, indent=1, sort_keys=True)


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_file(path) as fh:
        fh.write(text)


def fsync_dir(folder: str | Path) -> None:
    """Flush a folder's entries (a rename into it) to disk; a file system that cannot (EINVAL) has no need."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def clean_stale(folder: str | Path, name: str | None = None) -> int:
    """Remove the temporaries of writers that died before their rename (their process is gone from this
    host), of every file or of the one ``name``; a live writer's stays. Only for folders this host's processes
    write alone: a container's writer has a process id of its own namespace. Returns how many were removed."""
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return 0
    for entry in entries:
        match = _TEMPORARY.match(entry.name)
        if match and (name is None or entry.name.startswith(f".{name}.")) and not alive(int(match[1])):
            Path(entry.path).unlink(missing_ok=True)
            removed += 1
    return removed


def alive(pid: int) -> bool:
    """Whether a process of this id runs on this host (a writer's, by the id its temporaries carry)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:         # another user's process
        return True
    return True

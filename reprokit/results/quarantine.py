"""Damaged state files are set aside, never fatal: moved to a ``quarantine/`` folder beside them and named once.

A file cut short by a crash or a full disk, or one that fails its schema, stands for work that is
then done again (a run, a certificate, an environment). Moving it, rather than deleting it, keeps
the evidence for whoever wants to know what happened; moving it, rather than leaving it, means it
is named once, not at every command.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path

from reprokit.kits.contract.files import fsync_dir

QUARANTINE = "quarantine"


def why_unreadable(text: str | bytes) -> str:
    """A short reason a JSON file's text does not parse, as the line names it ("unterminated JSON", ...)."""
    if not text:
        return "empty file"
    try:
        json.loads(text)
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()) - 1 or exc.msg.startswith("Unterminated string"):
            return "unterminated JSON"          # cut short: by a crash, a full disk or a copy
        return f"not JSON: {exc.msg}, byte {exc.pos}"
    return "readable"


def set_aside(path: Path, what: str, why: str, consequence: str, into: Path | None = None) -> Path | None:
    """Move a damaged file into ``quarantine/`` beside it (or ``into``, on the same file system) and say so in one
    line, e.g. "result 54281ab453c5 was damaged (unterminated JSON); moved to …; it will run again". None if
    another process moved it first."""
    folder = into or path.parent / QUARANTINE
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{path.parent.name}-{path.name}" if into else path.name
    stem = f"{name}.{time.strftime('%Y%m%dT%H%M%S')}.{os.getpid()}"
    dest = folder / stem
    for n in itertools.count(2):            # the same file damaged again within the second: keep both
        if not dest.exists():
            break
        dest = folder / f"{stem}.{n}"
    try:
        os.replace(path, dest)
    except FileNotFoundError:
        return None
    fsync_dir(folder)
    print(f"{what} was damaged ({why}); moved to {dest}; {consequence}", file=sys.stderr)
    return dest

"""A full state or report folder: the run that could not be written is lost, the command stops in one sentence.

Every result is written whole or not at all (reprokit/kits/contract/files.py), so a full disk damages no
finished result; what it costs is the run in hand. Going on would only lose the next one too.
"""
from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

from reprokit.errors import UserError

FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(UserError):
    """A folder filled up: one sentence with how much the rest needs and what to do."""


def is_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in FULL


def size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (0 where missing)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return total


def amount(n: float) -> str:
    for unit, size_of in (("GB", 2**30), ("MB", 2**20)):
        if n >= size_of:
            return f"{n / size_of:.1f} {unit}"
    return f"{max(1, round(n / 2**10))} kB"


def lost(label: str, why: str) -> None:
    print(f"{label}: lost (disk-full: {why})", file=sys.stderr)


def per_run(results: Path, work: Path) -> float | None:
    """Bytes one run takes, from the runs finished there: its result file and its work folder; None before any."""
    sizes = []
    for path in results.glob("*.json"):
        try:
            ok = json.loads(path.read_bytes()).get("status") == "ok"
        except (OSError, ValueError, AttributeError):      # damaged or gone: not a finished run to measure by
            continue
        if ok:
            sizes.append(size(path) + size(work / path.stem))
    return sum(sizes) / len(sizes) if sizes else None


def stop(folder: Path, left: int, each: float | None) -> DiskFull:
    """The sentence the command stops with: how much the ``left`` runs need, ``each`` bytes a run."""
    need = (f"the {left} run(s) left need about {amount(left * each)} more (from the sizes of the finished "
            f"results and their work folders)" if each else
            f"no run has finished there yet, so how much the {left} run(s) left need is not known")
    return DiskFull(f"{folder} is full: {need}; free space there and run the same command again.")

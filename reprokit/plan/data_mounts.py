"""--data [FRAMEWORK:]WHERE=FOLDER: a folder of the user's own data, shown to a script where it looks.

A script that reads data the kit does not serve by name (its own images, an ImageFolder, a dataset the kit
does not know) gets the user's folder at WHERE, a path relative to the script's folder (``./data``,
``../data``): read-only under Docker, a link to the folder on the local runner. The run id covers a manifest
of the folder (every file's name, size and modification time, hashed): an edited dataset makes a new run,
without reading every byte of a large one at each plan.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath
from typing import Any

from reprokit.errors import UserError
from reprokit.kits.contract.names import FRAMEWORKS

FORM = "--data [FRAMEWORK:]WHERE=FOLDER, e.g. --data pytorch:./data=/datasets/mine"


def parse(given: list[str] | None) -> dict[str, tuple[tuple[str, Path], ...]]:
    """(where, folder) pairs by framework ("" for every framework), each folder checked before any run."""
    out: dict[str, tuple[tuple[str, Path], ...]] = {}
    for one in given or []:
        target, sep, folder = one.partition("=")
        framework, colon, where = target.rpartition(":") if ":" in target.split("/")[0] else ("", "", target)
        if not sep or not where or not folder or (colon and framework not in FRAMEWORKS):
            raise UserError(f"--data {one!r} is not understood; use {FORM} (FRAMEWORK one of {', '.join(FRAMEWORKS)})")
        at = PurePosixPath(where)
        if at.is_absolute() or at.parts.count("..") > 1 or ".." in at.parts[1:] or not at.parts:
            raise UserError(f"--data {one!r}: {where} must be a path relative to the script's folder, with at most "
                            f"one leading ../ (where the script reads it, as ./data or ../data)")
        path = Path(folder).expanduser().resolve()
        if not path.is_dir():
            raise UserError(f"--data {one!r}: {path} is not a folder; give the folder that holds your data")
        out[framework] = (*out.get(framework, ()), (where, path))
    return out


def mounts_for(framework: str, given: dict[str, tuple[tuple[str, Path], ...]]) -> list[dict[str, Any]]:
    """The spec's mounts of one framework's script: those given for it and for every framework."""
    return [_manifest(at, folder) for at, folder in (*given.get("", ()), *given.get(framework, ()))]


def _manifest(at: str, folder: Path) -> dict[str, Any]:
    digest, files, size = hashlib.sha256(), 0, 0
    for here, dirs, names in os.walk(folder, followlinks=True):
        dirs.sort()
        for name in sorted(names):
            stat = (Path(here) / name).stat()
            rel = (Path(here) / name).relative_to(folder).as_posix()
            digest.update(f"{rel}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
            files, size = files + 1, size + stat.st_size
    return {"at": at, "folder": str(folder), "files": files, "bytes": size, "manifest_sha256": digest.hexdigest()}

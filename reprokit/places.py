"""Where a command keeps its state and writes its reports: in the folder it runs in, as asv keeps .asv/ and
optimum-benchmark writes runs/ (``./.reprokit/`` and ``./reprokit-reports/<name>/``), unless --state-dir and
--reports-dir say otherwise (the clone's `nox -s reproduce` passes --reports-dir reports). What costs minutes to
make and is a pure function of its inputs goes to the per-user cache instead, shared by every project: the kits'
environments, and the datasets a run stages. Every command names both folders on its first line.
"""
from __future__ import annotations

import errno
import tempfile
from pathlib import Path

from reprokit.environments import cache
from reprokit.errors import UserError

STATE = Path(".reprokit")                   # finished results, work folders, the ledger: in the command's folder
REPORTS = Path("reprokit-reports")          # reports/<name>/ of a command
DATA = cache.root() / "data"                # staged and generated datasets, shared by every project of this user


def first_line(state: Path = STATE, reports: Path = REPORTS) -> str:
    return f"state: {state.resolve()}  reports: {reports.resolve()}"


def _unwritable(folder: Path) -> str | None:
    """Why a command could not make or write ``folder`` (where it is missing: the first of its parents that exists),
    or None."""
    folder = folder.resolve()
    there = next(p for p in (folder, *folder.parents) if p.exists())
    if not there.is_dir():
        return f"{there} is a file"
    try:
        with tempfile.TemporaryFile(dir=there):
            return None
    except OSError as exc:
        return "read-only" if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) else (exc.strerror or str(exc))


def check_writable(state: Path, reports: Path | None) -> None:
    """Refuse, before any run, a state or reports folder (None: the command writes no report) the command cannot
    make or write (a read-only working folder, a read-only disk), in one sentence naming the option that moves it."""
    wanted = [(state, "--state-dir", STATE)] + ([(reports, "--reports-dir", REPORTS)] if reports else [])
    for folder, option, default in wanted:
        why = _unwritable(folder)
        if why is None:
            continue
        if folder.resolve() == default.resolve():
            raise UserError(f"the working folder {Path.cwd()} is {why}, so the kit cannot keep its state ({STATE}/) "
                            f"and reports ({REPORTS}/) in it: run in a folder you can write, or give --state-dir DIR "
                            f"and --reports-dir DIR on a disk you can write.")
        raise UserError(f"{option} {folder.resolve()} cannot be written ({why}): give {option} a folder you can "
                        f"write.")

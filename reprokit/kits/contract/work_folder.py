"""A run's work folder: the script's folder, copied as code and not as the world.

A script writes beside itself (checkpoints, plots), so each run gets a writable copy of its folder. The
copy leaves out what is not the script's: the kit's own state and report folders (a user who runs from
the script's folder with ``--state-dir ./state`` would otherwise copy each run into the next), version
control and tool folders, virtualenvs, and the packages the plan leaves out because they are named like a
top-level module of the framework's lock (a checkout of ``jax/`` beside JAX's examples would be imported
instead of the installed package; the spec lists them and the probe declares them). Every file is cloned
where the filesystem shares blocks (btrfs, XFS: the copy costs nothing until written), else copied. Files
are never linked: a framework's own C++ writer (torch.save's zip writer, h5py) would follow a link and
overwrite the user's file with a model trained on a stand-in. The host applies the same rules to hash what
the script can import and to refuse, before any run, a folder that would copy more than COPY_LIMIT_BYTES.
"""
from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Collection, Iterator
from pathlib import Path

COPY_LIMIT_BYTES = 1 << 30
FICLONE = 0x40049409                  # linux/fs.h: share the source's blocks (copy on write)
SKIPPED_NAMES = frozenset({".git", ".hg", ".svn", ".reprokit", ".nox", ".tox", ".venv", "__pycache__",
                           ".ipynb_checkpoints", ".mypy_cache", ".pytest_cache", ".ruff_cache", "node_modules"})
FIGURES = (".png", ".jpg", ".jpeg", ".svg", ".pdf", ".gif")
NOTEBOOK_FOLDER = "notebook"           # beside the work folder: the script a notebook's code cells make


def own_files(work: Path) -> tuple[str, ...]:
    """Where the script's own code runs from: its copy of its folder, and a notebook's converted cells beside it
    (what a probe counts as the script's own calls, as against its libraries')."""
    return str(work) + os.sep, str(work.with_name(NOTEBOOK_FOLDER)) + os.sep


def skipped(folder: Path) -> str | None:
    """Why a folder inside the script's is not the script's (None: it is)."""
    if folder.name in SKIPPED_NAMES:
        return "a tool's folder"
    if (folder / "pyvenv.cfg").is_file():
        return "a virtualenv"
    if (folder / "ledger").is_dir() or (folder / "command.lock").exists():
        return "a reprokit state folder"
    if (folder / "report.md").is_file() and (folder / "summary.csv").is_file():
        return "a reprokit report folder"
    return None


def walk(root: Path, into: Path | None = None, leaving: Collection[str] = ()) -> Iterator[tuple[Path, list[str]]]:
    """(folder, file names) of every folder of the script's that the work copy holds; never a folder that
    holds the copy itself (``into``), nor one the plan leaves out (``leaving``: paths relative to root)."""
    inside = into.resolve() if into else None
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not skipped(Path(here, d))
                         and Path(here, d).relative_to(root).as_posix() not in leaving
                         and not (inside and inside.is_relative_to(Path(here, d).resolve())))
        yield Path(here), sorted(files)


def shadowing(root: Path, entries: Collection[Path], modules: Collection[str]) -> list[str]:
    """The packages (folders with an ``__init__.py``) at the top of the run's import path (``entries``: folders
    under root) that are named like one of ``modules``: imported instead of the installed package of that name."""
    return sorted({(entry / name).relative_to(root).as_posix() for entry in entries for name in modules
                   if (entry / name / "__init__.py").is_file() and not skipped(entry / name)})


def copied_bytes(root: Path, leaving: Collection[str] = ()) -> int:
    """What a run's copy holds, in bytes."""
    return sum(os.stat(folder / name).st_size for folder, names in walk(root, leaving=leaving) for name in names
               if (folder / name).is_file())


def make(root: Path, work: Path, leaving: Collection[str] = ()) -> None:
    """Copy the script's folder into work (fresh), without the folders ``leaving`` names; a dangling link is left
    out."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for folder, names in walk(root, into=work, leaving=leaving):
        target = work / folder.relative_to(root)
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            if (folder / name).is_file():
                _clone(folder / name, target / name)


def _clone(source: Path, target: Path) -> None:
    with open(source, "rb") as src, open(target, "wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        except OSError:                        # ext4, tmpfs, overlay: a plain copy
            shutil.copyfileobj(src, dst, 1 << 20)
    shutil.copystat(source, target)


def mount(work: Path, mounts: list[tuple[str, Path]]) -> list[str]:
    """The user's own data folders (--data) where the script reads them, relative to its folder (the copy of
    whatever the script's folder held there is replaced); the shims' declarations."""
    said = []
    for at, folder in mounts:
        target = Path(os.path.normpath(work / at))
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(folder, target_is_directory=True)
        said.append(f"the user's folder given with --data is where the script reads {at} (a link to {folder}, "
                    f"read-only in a container)")
    return said


def figures(work: Path, since: float) -> list[Path]:
    """The images the script wrote during the run (plots it saved), by modification time."""
    return sorted(p for folder, names in walk(work) for p in (folder / n for n in names)
                  if p.suffix.lower() in FIGURES and not p.is_symlink() and p.stat().st_mtime >= since)

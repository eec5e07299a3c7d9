"""Where a result came from: the kit's version, the content of its code and, where there is one, the commit it
was made from; the lock file; the host; and, where a user's scripts sit in a git repository, their commit."""
from __future__ import annotations

import hashlib
import json
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

import reprokit
from reprokit import resources

# What makes a result, in a clone: a change there, not yet committed, makes the tree dirty (a fresh report is not).
CODE_PATHS = ("reprokit", "locks", "docker", "claims", "noxfile.py", "pyproject.toml")
NO_COMMIT = "unknown (not a git checkout)"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_sha256(root: Path, pattern: str = "*.py") -> str:
    """One hash over the names and bytes of every matching file under root."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob(pattern)):
        if "__pycache__" in path.parts:
            continue
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def kit_code_sha256() -> str:
    """sha256 over the Python files a kit process imports (resources.kit_code: reprokit/__init__.py and
    reprokit/kits/), by their names in the package: the same from a clone and from the wheel built from it, wherever
    either is installed."""
    digest = hashlib.sha256()
    for path in resources.kit_code():
        name = path.relative_to(resources.kit_import_root()).as_posix()
        digest.update(f"{name}\0{tree_sha256(path) if path.is_dir() else sha256_file(path)}\0".encode())
    return digest.hexdigest()


def git(folder: Path, *args: str) -> str | None:
    """git's answer in ``folder``, or None where there is no git or no repository."""
    try:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def checkout_facts(top: Path) -> dict[str, Any] | None:
    """The commit of the clone at ``top`` and whether the code that makes a result differs from it; None where
    ``top`` is not the top of a git work tree (a venv inside someone's repository is not the kit's clone)."""
    found = git(top, "rev-parse", "--show-toplevel")
    if found is None or Path(found).resolve() != top.resolve():
        return None
    commit = git(top, "rev-parse", "HEAD")
    status = git(top, "status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
    return {"code_commit": commit or NO_COMMIT, "code_dirty": bool(status) if status is not None else True}


def _commit_facts() -> dict[str, Any]:
    """The clone's own, else what the wheel's build recorded of its clone (setup.py), else no commit: an
    installed wheel's code is what its version and code hash say, not dirty."""
    top = resources.checkout()
    if top is not None:
        return checkout_facts(top) or {"code_commit": NO_COMMIT, "code_dirty": True}
    stamp = resources.root() / resources.BUILD_STAMP
    if stamp.is_file():
        return {k: v for k, v in json.loads(stamp.read_text()).items() if k in ("code_commit", "code_dirty")}
    return {"code_commit": NO_COMMIT, "code_dirty": False}


def code(user_dirs: tuple[Path, ...] = ()) -> dict[str, Any]:
    """code_info() plus a hash of the Python files in a user's experiment folders, which the kits import."""
    info = dict(code_info())
    if user_dirs:
        info["user_code_sha256"] = hashlib.sha256("".join(tree_sha256(d) for d in user_dirs).encode()).hexdigest()
    return info


@lru_cache(maxsize=1)
def code_info() -> dict[str, Any]:
    """The kit's version, the commit and whether the tree differs from it, and a hash of the kit code that runs.

    All of them go into every RunSpec and so into its id: a new commit or an uncommitted edit of the kits never
    reuses an old result.
    """
    return {**_commit_facts(), "code_sha256": kit_code_sha256(), "kit_version": reprokit.__version__}


def scripts_git(folder: Path, files: list[str]) -> dict[str, Any]:
    """Where a user's script folder sits in a git repository: its commit (``script_commit``) and whether any of
    ``files`` (the run's copy, relative to the folder) differs from it or is not in it (``script_dirty``); {} where
    it sits in none, or in the kit's own clone (whose commit the result records already)."""
    if folder.resolve().is_relative_to(resources.kits()):
        return {}                   # the seeds' posted scripts: the kit's own code, wherever it is installed
    top = git(folder, "rev-parse", "--show-toplevel")
    kit = resources.checkout()
    if top is None or (kit is not None and Path(top).resolve() == kit.resolve()):
        return {}
    commit = git(folder, "rev-parse", "HEAD")
    status = git(folder, "status", "--porcelain", "--untracked-files=all", "--", ".")
    if status is None:
        return {}
    inside = folder.resolve().relative_to(Path(top).resolve())
    copied = {(inside / name).as_posix() for name in files}
    changed = {line[3:].split(" -> ")[-1].strip('"') for line in status.splitlines() if len(line) > 3}
    return {"script_commit": commit or NO_COMMIT, "script_dirty": bool(changed & copied)}

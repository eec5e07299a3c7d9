"""Where a result came from: the code's commit and content, the lock file, the host."""
from __future__ import annotations

import hashlib
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CODE_PATHS = ("kits", "reprokit", "locks", "docker", "claims", "noxfile.py", "pyproject.toml")


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


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def code(user_dirs: tuple[Path, ...] = ()) -> dict[str, Any]:
    """code_info() plus a hash of the Python files in a user's experiment folders, which the kits import."""
    info = dict(code_info())
    if user_dirs:
        info["user_code_sha256"] = hashlib.sha256("".join(tree_sha256(d) for d in user_dirs).encode()).hexdigest()
    return info


@lru_cache(maxsize=1)
def code_info() -> dict[str, Any]:
    """The commit, whether the tree differs from it, and a hash of the kit code that runs.

    All three go into every RunSpec and so into its id: a new commit or an
    uncommitted edit of the kits never reuses an old result.
    """
    commit = _git("rev-parse", "HEAD")
    # Dirty means the code that makes a result differs from the commit (a fresh report is not code).
    status = _git("status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
    return {
        "code_commit": commit or "unknown (not a git checkout)",
        "code_dirty": bool(status) if status is not None else True,
        "code_sha256": tree_sha256(REPO / "kits"),
    }

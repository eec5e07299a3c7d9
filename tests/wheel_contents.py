"""What a wheel of reprokit must hold, listed from the clone it is built from, and what a given wheel lacks of it.

    python tests/wheel_contents.py DIST/reprokit-*.whl      (CI: .ci/run; exit 1 naming each missing file)

The list: every file the clone keeps of its one package (reprokit/, the kits' reprokit/kits/ within it: their Python
files and their data, the schemas, the peak FLOPs, the seed experiments and their posts, the ranks' site folder), and
locks/, docker/ and claims/ under reprokit/_resources/, where setup.py puts them and reprokit/resources.py finds them. A file the
wheel lacks fails here, at build time, not at a user's first run.
"""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from checkout import REPO

PACKAGES = ("reprokit",)
RESOURCES = ("locks", "docker", "claims")          # reprokit/resources.py FOLDERS
PACKAGED = "reprokit/_resources"                    # reprokit/resources.py PACKAGED


def must_hold(repo: Path = REPO) -> list[str]:
    """Every file the installed tool may read, by its name in the wheel (the clone's tracked and new files; what git
    ignores, caches and build output, is not the tool's)."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "--cached", "--others", "--exclude-standard", "--",
                             *PACKAGES, *RESOURCES], capture_output=True, text=True, check=True).stdout.split("\n")
    names = []
    for name in filter(None, listed):
        if not (repo / name).is_file():             # deleted in the clone, not yet in a commit
            continue
        names.append(f"{PACKAGED}/{name}" if name.split("/")[0] in RESOURCES else name)
    return sorted(names)


def missing(wheel: Path, repo: Path = REPO) -> list[str]:
    """What the wheel lacks of must_hold()."""
    with zipfile.ZipFile(wheel) as z:
        held = set(z.namelist())
    return [name for name in must_hold(repo) if name not in held]


if __name__ == "__main__":
    lacking = missing(Path(sys.argv[1]))
    for name in lacking:
        print(f"{sys.argv[1]} lacks {name}", file=sys.stderr)
    sys.exit(1 if lacking else 0)

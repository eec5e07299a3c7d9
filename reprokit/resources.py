"""Where the kit's own files are, found through importlib.resources and nowhere else: the lock files, the
Dockerfiles, the claims, the seed experiments, the schemas and the kits' code.

A wheel holds locks/, docker/ and claims/ in this package's ``_resources`` folder (setup.py copies them there
as it builds); a clone keeps them at the top of its checkout, beside this package, where the project's layout
has them, and reads them there (an editable install too). ``root()`` is the one folder that holds all three,
whichever it is, and a file in it is named relative to it wherever it is recorded (``locks/pytorch.txt``), so a
result names the same file from a clone and from that clone's wheel. Nothing else in the package looks for a
file of its own by walking up from ``__file__``: a move of a folder is a change here.
"""
from __future__ import annotations

import importlib.resources
from functools import lru_cache
from pathlib import Path

from reprokit.errors import UserError

PACKAGED = "_resources"                       # in a wheel: reprokit/_resources/{locks,docker,claims}
FOLDERS = ("locks", "docker", "claims")
BUILD_STAMP = "build.json"                    # in a wheel's _resources: the commit it was built from, where known
# The package a kit process imports (the kits' code, a subpackage of this one): what the code hash covers
# (reprokit/results/provenance.py), what the local runner copies for a kit process and the Docker runner mounts.
KIT_PACKAGE = "reprokit.kits"
EXPERIMENTS = (KIT_PACKAGE, "experiments")     # the seed experiments: a folder of the kits' package


def folder_of(package: str) -> Path:
    """A package's folder on disk (the kit runs its files with other interpreters, so they must be files)."""
    found = importlib.resources.files(package)
    path = Path(str(found))
    if not path.is_dir():
        raise UserError(f"the package {package} is not a folder on disk ({found}); install reprokit from its wheel "
                        f"or a clone (pipx install reprokit), not as a zip.")
    return path


def checkout() -> Path | None:
    """The top of the clone this package runs from (it holds locks/, docker/ and claims/ beside reprokit/), or
    None where the package is installed from a wheel."""
    top = folder_of("reprokit").parent
    return top if all((top / name).is_dir() for name in FOLDERS) and (top / "pyproject.toml").is_file() else None


@lru_cache(maxsize=1)
def root() -> Path:
    """The folder that holds locks/, docker/ and claims/: the wheel's packaged copy, else the clone's top."""
    packaged = folder_of("reprokit") / PACKAGED
    if packaged.is_dir():
        return packaged
    top = checkout()
    if top is None:
        raise UserError(f"reprokit's own files ({', '.join(f + '/' for f in FOLDERS)}) are neither in {packaged} "
                        f"nor beside the package: reinstall it (pipx reinstall reprokit), or in a clone restore them "
                        f"with git checkout.")
    return top


def locks() -> Path:
    return root() / "locks"


def docker() -> Path:
    return root() / "docker"


def claims() -> Path:
    return root() / "claims"


def experiments() -> Path:
    """The seed experiments (vgg16_cifar10_speed.toml, ...) and their posted scripts."""
    package, folder = EXPERIMENTS
    return folder_of(package) / folder


def schemas() -> Path:
    return folder_of("reprokit") / "schemas"


def kits() -> Path:
    """The folder of the kits' package, reprokit/kits/."""
    return folder_of(KIT_PACKAGE)


def kit_code() -> tuple[Path, Path]:
    """What a kit process imports: this package's __init__.py (which imports nothing, so a framework's environment
    needs none of the host's dependencies) and the kits' package."""
    return folder_of("reprokit") / "__init__.py", kits()


def kit_import_root() -> Path:
    """The folder that holds the ``reprokit`` package the kits are in: what a kit process needs on its path to import
    them (in an installed wheel the host's site-packages, which a locked environment must not see:
    reprokit/runners/local.py)."""
    return folder_of("reprokit").parent


def named(path: Path) -> str:
    """A file of the kit's as a result records it: relative to root() (``locks/pytorch.txt``), else as it is."""
    return path.relative_to(root()).as_posix() if path.is_relative_to(root()) else str(path)

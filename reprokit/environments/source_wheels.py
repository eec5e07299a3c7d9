"""Pure-Python packages that publish only a source archive, built once into wheels in the per-user cache.

The resolver takes wheels only (it picks for the images' Python and platform, which pip allows for wheels
alone), so a dependency with no wheel on the index made pip's resolution impossible: ``promise``, which every
``tensorflow-datasets`` needs, is the common one (the Flax examples' requirements bring it). Where pip's
conflict names dependencies, each that has no wheel for the images is built here, from its source, with
pip's own ``pip wheel``; a build that is pure Python (``none-any``) runs on any Python 3 and platform, so it
joins the folder that resolution and the wheels' download read (``--find-links``). A build that is not pure
Python would be this host's, not the images': it is removed and refused in one sentence.
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from reprokit.environments import cache
from reprokit.errors import UserError

BUILT = "source-wheels"            # the cache's folder of wheels built from source archives
# pip's two accounts of a dependency it found no wheel of: a conflict's "tensorflow-datasets 4.9.10 depends on
# promise", where it tried several releases, and "the requirement promise (from tensorflow-datasets)", where one
_DEPENDS = re.compile(r"^\s*\S+ \S+ depends on (.+?)\s*$|satisfies the requirement (\S+) \(from [^)]+\)",
                      re.MULTILINE)


def folder() -> Path:
    path = cache.root() / BUILT
    path.mkdir(parents=True, exist_ok=True)
    return path


def find_links() -> list[str]:
    """pip's options that read the built wheels."""
    return ["--find-links", str(folder())]


def dependencies_named(pip_output: str) -> list[str]:
    """The dependencies (canonical names) that pip's conflict says a candidate needs, in the order named."""
    names: list[str] = []
    for depends, required in _DEPENDS.findall(pip_output):
        text = depends or required
        try:
            name = canonicalize_name(Requirement(text).name)
        except InvalidRequirement:
            continue
        if name not in names:
            names.append(name)
    return names


def build_missing(names: list[str], constraints: Path, target: list[str], where: str,
                  log: Callable[[str], object] = print) -> list[str]:
    """Of the named dependencies, those with no wheel for the images built from source into the cache's folder;
    returns the names built. A build that is not pure Python is refused."""
    built = []
    for name in names:
        if _already_built(name) or _has_wheel(name, constraints, target):      # the cheap look first
            continue
        log(f"requirements: {name} publishes no wheel for {where}; building one from its source, once per machine")
        with tempfile.TemporaryDirectory(prefix="reprokit-wheel-") as scratch:
            proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                                   "--disable-pip-version-check", "-c", str(constraints), "--wheel-dir", scratch,
                                   name], capture_output=True, text=True)
            wheels = list(Path(scratch).glob("*.whl"))
            if proc.returncode != 0 or len(wheels) != 1:
                tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                raise UserError(f"{name}, which the requirements need, publishes no wheel for {where}, and its "
                                f"source did not build here ({tail}); give its wheel with PIP_FIND_LINKS.")
            tags = parse_wheel_filename(wheels[0].name)[3]
            if not all(t.abi == "none" and t.platform == "any" for t in tags):
                raise UserError(f"{name}, which the requirements need, publishes no wheel for {where}, and its "
                                f"source builds one for this host only ({wheels[0].name}); give a wheel of it for "
                                f"{where} with PIP_FIND_LINKS.")
            wheels[0].replace(folder() / wheels[0].name)
        built.append(name)
    return built


def _already_built(name: str) -> bool:
    return any(parse_wheel_filename(w.name)[0] == name for w in folder().glob("*.whl"))


def _has_wheel(name: str, constraints: Path, target: list[str]) -> bool:
    """Whether the index (or PIP_FIND_LINKS) has a wheel of the package for the images, within the constraints
    (a dry run: pip reads its metadata, downloads no wheel)."""
    with tempfile.TemporaryDirectory(prefix="reprokit-wheel-") as scratch:
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
                               "--quiet", "--disable-pip-version-check", *target, "-c", str(constraints),
                               "--target", scratch, name], capture_output=True, text=True)
    return proc.returncode == 0

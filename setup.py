"""The one build step pyproject.toml cannot declare: a clone keeps the lock files, the Dockerfiles and the claims at
the top of its checkout (locks/, docker/, claims/), and a wheel carries them in the package, in reprokit/_resources/,
where reprokit/resources.py finds them; with the commit the build was made from, where git knows it (the same facts
a clone's results record, so a result names one commit from the clone and from its wheel)."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
FOLDERS = ("locks", "docker", "claims")            # reprokit/resources.py FOLDERS
PACKAGED = Path("reprokit", "_resources")          # reprokit/resources.py PACKAGED
STAMP = "build.json"                               # reprokit/resources.py BUILD_STAMP


def _stamp() -> dict | None:
    """The commit facts of the checkout being built: an sdist's stamp (its build had git), else git's own."""
    if (HERE / STAMP).is_file():
        return json.loads((HERE / STAMP).read_text())
    sys.path.insert(0, str(HERE))
    from reprokit.results.provenance import checkout_facts
    return checkout_facts(HERE)


class BuildPy(build_py):
    """Copies locks/, docker/ and claims/ into the package, beside the stamp (an editable install reads the clone)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / PACKAGED
        shutil.rmtree(target, ignore_errors=True)
        for name in FOLDERS:
            shutil.copytree(HERE / name, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        stamp = _stamp()
        if stamp:
            (target / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")


class Sdist(sdist):
    """The sdist carries the stamp: the wheel built from it has no git to ask."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        stamp = _stamp()
        if stamp:
            (Path(base_dir) / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})

"""The numpy stub framework (tests/stub_plugin/), installed as a plugin package: `nox -s tests` installs it into a
folder of the tests' environment that is not on the path, so that only a process given that folder (``env()``)
sees the ``stub`` and ``stub2`` entries of the ``reprokit.frameworks`` group, as a user's host would see a plugin
installed beside reprokit."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SITE = Path(sys.prefix) / "reprokit-test-plugins"          # noxfile.py tests: pip install --target here
INSTALL = "nox -s tests --install-only"


def env(*paths: Path | str, **more: str) -> dict[str, str]:
    """A process environment in which the stub is registered: the checkout, ``paths`` and the plugins' folder on
    PYTHONPATH, with ``more`` over it."""
    if not (SITE / "reprokit_stub_kit").is_dir():
        pytest.fail(f"the stub plugin is not installed in {SITE}; run `{INSTALL}` (noxfile.py tests installs it)")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (REPO, *paths, SITE))), **more}


def register(folder: Path, dist: str, entries: dict[str, str]) -> None:
    """A distribution in ``folder`` (a folder a process has on its path) that registers ``entries`` (name ->
    module:attr) in the ``reprokit.frameworks`` group, as pip leaves one: its dist-info, METADATA and
    entry_points.txt, which importlib.metadata reads."""
    info = folder / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
    (info / "entry_points.txt").write_text(f"[reprokit.frameworks]\n{lines}")

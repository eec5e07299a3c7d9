"""A script's extra requirements: hash-pinned, layered on its framework's lock, installed from fetched wheels.

A script may import what its framework's lock does not hold (seed 000's PyTorch script imports tqdm).
The experiment names a requirements file per script (``requirements = "requirements.txt"``), every
requirement pinned with ``==`` and its ``--hash`` lines, as ``pip-compile --generate-hashes`` or
``uv pip compile --generate-hashes`` writes them. Planning refuses a file that is not, and a package
that a lock of the framework pins at another version (the script would run on other libraries than
the kit measured); one the lock already pins at that version is left to the lock. What is left is
the spec's ``install`` list, in the run id. Before any run the host downloads those wheels
(``pip download --require-hashes --no-deps``, for the images' Python and platform) into the data
folder, where every runner shows it to the probe, and the probe installs them from there with
``--no-index`` into the run's work folder before the script's first line, declared: no run has a
network.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kits.common.data import SCRIPT_WHEELS, wheels_key
from reprokit.environments import envs, images
from reprokit.errors import UserError

PYTHON_VERSION = "3.11"            # the images' Python (docker/*.Dockerfile) and the locks'
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;]+)")


def _logical_lines(text: str) -> list[str]:
    """The requirement lines, continuations joined, comments and blank lines left out."""
    out, current = [], ""
    for raw in text.splitlines():
        line = "" if raw.lstrip().startswith("#") else raw.split(" #")[0].strip()
        if not line:
            continue
        current = f"{current} {line.rstrip(chr(92)).strip()}".strip()
        if not line.endswith("\\"):
            out.append(current)
            current = ""
    return out + ([current] if current else [])


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> list[tuple[str, str, str]]:
    """(name, version, line) of each requirement, refusing one that is not pinned with its hashes."""
    out = []
    for line in _logical_lines(path.read_text()):
        match = _PIN.match(line)
        if line.startswith("-"):
            raise UserError(f"{path}: {line.split()[0]} is not allowed in a script's requirements; list each "
                            f"package pinned with == and its --hash lines")
        if not match or "--hash=sha256:" not in line:
            raise UserError(f"{path}: {line.split()[0]} is not hash-pinned: every requirement needs == and its "
                            f"--hash=sha256: lines (`uv pip compile --generate-hashes` writes them)")
        out.append((_name(match.group(1)), match.group(3), line))
    return out


def _locked(framework: str) -> dict[str, str]:
    """Every package each lock of the framework pins, by name: version (the first lock's where they differ)."""
    out: dict[str, str] = {}
    for lock in dict.fromkeys(images.load_bases()[framework]["locks"].values()):
        for name, version, _ in pins(envs.lock_path(Path(lock).stem)):
            out.setdefault(name, version)
    return out


def entry(folder: Path, relative: str, framework: str, experiment_file: Path) -> dict[str, Any]:
    """A script's requirements as its spec holds them: the file, its sha256, what the lock already pins and
    what is left to install."""
    path = folder / relative
    if not path.is_file():
        raise UserError(f"{experiment_file}: scripts: the requirements file {relative} is not a file in {folder}")
    locked = _locked(framework)
    install, in_lock = [], []
    for name, version, line in pins(path):
        if name in locked and locked[name] != version:
            raise UserError(f"{path}: {name}=={version} conflicts with the {framework} lock's {name}=={locked[name]}; "
                            f"pin {locked[name]} (the kit measures the lock's libraries)")
        (in_lock.append(f"{name}=={version}") if name in locked else install.append(line))
    return {"file": relative, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "install": install,
            "in_lock": in_lock}


def fetch(specs: list[dict[str, Any]], data_dir: Path, log: Callable[[str], object] = print) -> None:
    """The wheels every script spec's ``install`` list needs, downloaded once into the data folder."""
    wanted = {wheels_key(s["script"]["requirements"]["install"]): s for s in specs
              if s.get("source") == "script" and (s["script"].get("requirements") or {}).get("install")}
    for key, spec in wanted.items():
        folder = Path(data_dir) / SCRIPT_WHEELS / key
        if (folder / "complete").exists():
            continue
        lines = spec["script"]["requirements"]["install"]
        scratch = folder.with_name(key + ".partial")
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        (scratch / "requirements.txt").write_text("\n".join(lines) + "\n")
        log(f"requirements: downloading {len(lines)} wheel(s) for {spec['script']['path']} into {folder}")
        cmd = [sys.executable, "-m", "pip", "download", "--require-hashes", "--no-deps", "--only-binary=:all:",
               "--python-version", PYTHON_VERSION, "--implementation", "cp", "--dest", str(scratch),
               *[f"--platform={p}" for p in PLATFORMS], "-r", str(scratch / "requirements.txt")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise UserError(f"the extra requirements of {spec['script']['path']} could not be downloaded ({tail}); "
                            f"reach PyPI once (runs never do), or point pip at your wheels with PIP_FIND_LINKS")
        (scratch / "complete").write_text("")
        shutil.rmtree(folder, ignore_errors=True)
        scratch.rename(folder)

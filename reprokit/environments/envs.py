"""Virtualenvs for the local runner, built once per lock file from its pinned hashes."""
from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path

from kits.common.files import write_text_atomic
from reprokit.environments import images
from reprokit.errors import UserError
from reprokit.results import quarantine
from reprokit.results.provenance import REPO, sha256_file

STATE = REPO / ".reprokit"     # the kit's local state: environments, data, finished results
ENVS = STATE / "envs"          # shared by every state dir: an env is a pure function of its lock file

LOCKS = REPO / "locks"
COMPLETE = ".complete"      # written last, once the env's packages are installed


def lock_name(framework: str, flavor: str) -> str:
    """The lock file a framework's flavor installs from, as docker/bases.toml names it (the images use the
    same): cpu, cuda (its default GPU build) or another GPU build such as PyTorch's cuda12."""
    locks = images.load_bases()[framework]["locks"]
    if flavor not in locks:
        raise UserError(f"{framework} has no {flavor!r} build in {images.BASES_FILE}; it has {', '.join(locks)}.")
    return Path(locks[flavor]).stem


def lock_path(name: str) -> Path:
    path = LOCKS / f"{name}.txt"
    if not path.exists():
        raise UserError(f"{path} is missing: run `nox -s lock` on a machine that reaches PyPI to create it.")
    return path


def env_dir(root: Path, name: str) -> Path:
    return root / f"{name}-{sha256_file(lock_path(name))[:12]}"


def python_of(env: Path) -> Path:
    return env / "bin" / "python"


def ready(root: Path, name: str) -> bool:
    """Whether the env is built and whole; one whose marker is damaged is set aside here, to be built again."""
    env = env_dir(root, name)
    marker = env / COMPLETE
    try:
        text = marker.read_bytes()
    except FileNotFoundError:
        return False
    why = _damage(text, env)
    if why is not None:
        quarantine.set_aside(marker, f"the environment {env.name}", why, "it will be built again",
                             into=root / quarantine.QUARANTINE)       # the env's own folder is built anew
        return False
    return True


def _damage(marker: bytes, env: Path) -> str | None:
    """Why a marked env is not whole, or None: its marker holds the Python version that built it, one line."""
    if not marker.strip() or not marker.endswith(b"\n"):
        return "its completion marker is cut short"
    if not python_of(env).exists():
        return "its marker says complete but its python is missing"
    return None


def build(root: Path, name: str, log: Callable[[str], object] = print) -> Path:
    """Create the env unless a complete one exists; a half-built one is started again."""
    env = env_dir(root, name)
    if ready(root, name):
        return python_of(env)
    if env.exists():
        shutil.rmtree(env)
    log(f"building the {name} environment from {lock_path(name).relative_to(REPO)} into {env} (once per lock file)")
    venv.EnvBuilder(with_pip=True).create(env)
    cmd = [str(python_of(env)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--require-hashes", "--no-deps", "-r", str(lock_path(name))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise UserError(f"installing {lock_path(name).name} into {env} failed (pip exit {proc.returncode}); "
                        f"check the network or the pip configuration and re-run:\n{tail}")
    write_text_atomic(env / COMPLETE, sys.version.replace("\n", " ") + "\n")
    return python_of(env)

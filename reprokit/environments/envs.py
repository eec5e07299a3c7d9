"""Virtualenvs for the local runner, built once per lock file and Python version from its pinned hashes, in the
per-user cache (reprokit/environments/cache.py) that every clone, nox session and test run of this user shares.

An env's folder is ``<lock>-<sha12 of the lock>-py3XX``: a lock file edited by hand, or another Python, gets a
folder of its own, never one silently reused. One command builds it while others wait (a lock file beside it),
and its completion marker, written last, names what it installed, so a damaged env is found and built again.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import venv
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reprokit import resources
from reprokit.environments import base_images, cache
from reprokit.errors import UserError
from reprokit.kits.contract.files import write_text_atomic
from reprokit.locking import Lock
from reprokit.results import quarantine
from reprokit.results.provenance import sha256_file

ENVS = cache.root() / "envs"   # shared by every clone, install and state dir: an env is a pure function of its lock

LOCKS = resources.locks()
VERSIONS = LOCKS / "versions.toml"     # each lock's pins, and its env's measured size (installed_gb)
COMPLETE = ".complete"         # JSON, written last, once the env's packages are installed
LAST_USED = "last-used"        # touched whenever a command uses the env: `reprokit cache prune` reads its age
PYTHON_TAG = f"py{sys.version_info.major}{sys.version_info.minor}"

# A build needs its lock's measured size (installed_gb in locks/versions.toml) MARGIN times over, for pip's
# downloads and unpacking on the way.
UNMEASURED_GB = 8.0            # a CUDA build not measured yet: more than the largest measured, to be safe
MARGIN = 1.3
GB = 1e9


def lock_name(framework: str, flavor: str) -> str:
    """The lock file a framework's flavor installs from, as docker/bases.toml names it (the images use the
    same): cpu, cuda (its default GPU build) or another GPU build such as PyTorch's cuda12."""
    locks = base_images.load_bases()[framework]["locks"]
    if flavor not in locks:
        raise UserError(f"{framework} has no {flavor!r} build in {base_images.BASES_FILE}; it has {', '.join(locks)}.")
    return Path(locks[flavor]).stem


def lock_path(name: str) -> Path:
    path = LOCKS / f"{name}.txt"
    if not path.exists():
        raise UserError(f"{path} is missing: run `nox -s lock` on a machine that reaches PyPI to create it.")
    return path


def env_dir(root: Path, name: str) -> Path:
    return root / f"{name}-{sha256_file(lock_path(name))[:12]}-{PYTHON_TAG}"


def lock_file(env: Path) -> Path:
    """The lock one build of the env holds, beside its folder (a folder being replaced cannot hold it)."""
    return env.with_name(env.name + ".lock")


def python_of(env: Path) -> Path:
    return env / "bin" / "python"


def ready(root: Path, name: str) -> bool:
    """Whether the env is built and whole (looked at only: build() says what is wrong and builds it again)."""
    env = env_dir(root, name)
    return _damage(env, read_marker(env), sha256_file(lock_path(name))) is None


def read_marker(env: Path) -> dict[str, Any] | bytes | None:
    """The env's completion marker: its fields, its bytes where they are no JSON object, None where it is absent."""
    try:
        text = (env / COMPLETE).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        found = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return text
    return found if isinstance(found, dict) else text


def _damage(env: Path, marker: dict[str, Any] | bytes | None, lock_sha256: str) -> str | None:
    """Why a marked env is not whole, or None."""
    if marker is None:
        return "no completion marker"
    if isinstance(marker, bytes):
        why = quarantine.why_unreadable(marker)
        return "not a JSON object" if why == "readable" else why
    if marker.get("lock_sha256") != lock_sha256:
        return "its marker names another lock file"
    if not python_of(env).exists():
        return "its python is missing"
    names = marker.get("dist_info")
    if not isinstance(names, list) or not names:
        return "its marker lists no packages"
    site = env / str(marker.get("site_packages"))
    gone = [name for name in names if not (site / name).is_dir()]
    if gone:
        return f"{gone[0]} is gone" + (f", and {len(gone) - 1} more" if len(gone) > 1 else "")
    return None


def build(root: Path, name: str, log: Callable[[str], object] = print) -> Path:
    """The env's python, after building the env unless a whole one exists. Two commands that need it: one builds,
    the other waits (said once, with who builds) and then finds it ready."""
    env = env_dir(root, name)
    if ready(root, name):
        _used(env)
        return python_of(env)
    writable(root)
    lock = Lock(lock_file(env), f"the {name} environment in {env} to be built")
    lock.acquire(log)
    try:
        lock_sha256 = sha256_file(lock_path(name))
        marker = read_marker(env)
        why = _damage(env, marker, lock_sha256)
        if why is not None:
            if isinstance(marker, bytes):      # a file cut short is kept, as every damaged state file is
                quarantine.set_aside(env / COMPLETE, f"the completion marker of the {name} environment in {env}",
                                     why, "building it again", into=root / quarantine.QUARANTINE)
            elif env.exists():
                state = "was half-built" if marker is None else "is damaged"
                log(f"the {name} environment in {env} {state} ({why}): building it again")
            _build(env, name, lock_sha256, log)
        _used(env)
    finally:
        lock.release()
    return python_of(env)


def _build(env: Path, name: str, lock_sha256: str, log: Callable[[str], object]) -> None:
    if env.exists():
        shutil.rmtree(env)
    check_room(env.parent, name, shutil.disk_usage(env.parent).free)
    lock = lock_path(name)
    log(f"building the {name} environment from {lock.parent.name}/{lock.name} into {env} "
        f"(once per lock file on this machine, shared by every clone)")
    started = time.monotonic()
    venv.EnvBuilder(with_pip=True).create(env)
    cmd = [str(python_of(env)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--require-hashes", "--no-deps", "-r", str(lock)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise UserError(f"installing {lock.name} into {env} failed (pip exit {proc.returncode}); "
                        f"check the network or the pip configuration and re-run:\n{tail}")
    site = next(env.glob("lib/python*/site-packages"))
    marker = {"python": sys.version, "lock_sha256": lock_sha256, "site_packages": str(site.relative_to(env)),
              "dist_info": sorted(p.name for p in site.glob("*.dist-info"))}
    write_text_atomic(env / COMPLETE, json.dumps(marker, indent=1) + "\n")
    log(f"built the {name} environment in {time.monotonic() - started:.0f} s ({shown_size(size_bytes(env))})")


def _used(env: Path) -> None:
    try:
        (env / LAST_USED).touch()
    except OSError:
        pass                          # a cache shared read-only: using it needs no write


def needed_bytes(name: str) -> float:
    """The free space a build of this lock's env needs: its measured size with margin."""
    measured = tomllib.loads(VERSIONS.read_text()).get(name, {}).get("installed_gb")
    return (measured or UNMEASURED_GB) * GB * MARGIN


def check_room(folder: Path, name: str, free_bytes: float) -> None:
    """Refuse, before any download, a build that would fill the disk under the cache."""
    needed = needed_bytes(name)
    if free_bytes < needed:
        raise UserError(f"the {name} environment needs about {needed / GB:.1f} GB free in {folder} and "
                        f"{free_bytes / GB:.1f} GB are: free some space (`reprokit cache prune` removes unused "
                        f"environments), or set REPROKIT_CACHE to a folder on another disk.")


def writable(root: Path) -> None:
    """Refuse an environment cache that cannot be written, in one sentence, before waiting or building."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as exc:
        raise UserError(f"the environment cache {root} cannot be written ({exc.strerror or exc}): make it "
                        f"writable, or set REPROKIT_CACHE to a folder you can write.") from None


def size_bytes(folder: Path) -> int:
    """What the folder's files take on disk (a file linked twice counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for parent, _dirs, names in os.walk(folder):
        for name in names:
            try:
                st = os.lstat(os.path.join(parent, name))
            except FileNotFoundError:
                continue              # removed meanwhile (a build or a prune at work)
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def shown_size(size: float) -> str:
    return f"{size / GB:.1f} GB" if size >= 0.05 * GB else f"{size / 1e6:.0f} MB"

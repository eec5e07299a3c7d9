"""What a Docker container sees of the host, and as which user.

Each container gets the kit code, the user's extra folders and the dataset
read-only, each of the call's inputs read-only (a script's requirement set,
installed once in the per-user cache, among them), and exactly one writable mount:
the call's fresh, empty output folder (on a GPU whose framework build has only
PTX, also the cache of the kernels compiled from it). The Docker socket is
never mounted. The process runs as the host user, or, where that is root, as
the image's own user, to whom the files it needs are shared here.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from reprokit.environments.host_checks import JitCache
from reprokit.errors import UserError
from reprokit.runners.base import KitCall, fresh_folder

# The kits' folder mounted where `python -m reprokit.kits.run` finds it on the image's PYTHONPATH, /opt/reprokit:
# the folder /opt/reprokit/reprokit, without an __init__.py, is then a namespace package (no image installs
# reprokit). Simpler than mounting the wheel's kit-code copy, which a clone does not have.
PACKAGE_TARGET = "/opt/reprokit/reprokit"
KITS_TARGET = f"{PACKAGE_TARGET}/kits"
INPUTS_TARGET = "/opt/reprokit/in"
DATA_TARGET = "/data"
RESULTS_TARGET = "/results"
# The image's own user (see docker/*.Dockerfile). A host user that is not root
# runs the container under its own uid:gid instead, so it owns what the kit writes.
IMAGE_USER = (10001, 10001)
RESERVED_TARGETS = (PACKAGE_TARGET, INPUTS_TARGET, DATA_TARGET, RESULTS_TARGET, "/tmp", "/opt/venv")
DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")


def container_user() -> tuple[int, int]:
    uid, gid = os.getuid(), os.getgid()
    return IMAGE_USER if uid == 0 else (uid, gid)


def unreadable(root: Path, uid: int, *, recursive: bool = True, limit: int = 10000) -> Path | None:
    """The first file or folder under root that uid cannot read (by owner or other bits)."""
    def denied(p: Path, need_x: bool) -> bool:
        st = p.stat()
        if st.st_uid == uid:
            return False
        mode = st.st_mode
        return not (mode & 0o004) or (need_x and not (mode & 0o001))

    if denied(root, root.is_dir()):
        return root
    if root.is_file() or not recursive:
        return None
    for n, (dirpath, dirnames, filenames) in enumerate(os.walk(root)):
        if n > limit:
            break
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for d in dirnames:
            if denied(Path(dirpath, d), True):
                return Path(dirpath, d)
        for f in filenames:
            if denied(Path(dirpath, f), False):
                return Path(dirpath, f)
    return None


def check_extra_mounts(extra_mounts: Sequence[tuple[Path, str]]) -> None:
    """UserError where an extra mount would cover one of the kit's own targets or expose the Docker socket."""
    for host, target in extra_mounts:
        if not target.startswith("/") or any(target == t or target.startswith(t.rstrip("/") + "/")
                                             for t in RESERVED_TARGETS) or target == "/":
            raise UserError(f"the extra mount target {target!r} is not allowed; choose an absolute path "
                            f"outside {', '.join(RESERVED_TARGETS)} (e.g. /opt/reprokit/user).")
        for sock in DOCKER_SOCKETS:
            s = Path(sock)
            if host == s or s.is_relative_to(host) or (s.exists() and host == s.resolve()):
                raise UserError(f"the extra mount {host} would expose the Docker socket to the container; "
                                f"mount a folder that does not contain {sock}.")


def call_mounts(call: KitCall, kits_dir: Path, extra_mounts: Sequence[tuple[Path, str]], data_dir: Path,
                jit: JitCache | None) -> list[tuple[Path, str, bool]]:
    """(host path, container path, writable) for one call: the kit code, the user's folders and the
    data read-only, each of the call's inputs read-only, and its output folder, the one writable mount
    besides the compiled-kernel cache of a GPU that has only PTX in the framework's build."""
    fixed = [(kits_dir, KITS_TARGET, False), *((h, t, False) for h, t in extra_mounts),
             (data_dir, DATA_TARGET, False)]
    inputs = [(Path(p).resolve(), f"{INPUTS_TARGET}/{i}/{Path(p).name}", False) for i, p in enumerate(call.inputs)]
    cache = [(jit.host, jit.target, True)] if jit else []
    return [*fixed, *inputs, *cache, (Path(call.output).resolve(), RESULTS_TARGET, True)]


def container_path(path: Path, mounts: list[tuple[Path, str, bool]]) -> str:
    """Where the process sees a host path: under the innermost mount that holds it."""
    path = Path(path).resolve()
    holders = [(host, target) for host, target, _ in mounts if path == host or path.is_relative_to(host)]
    if not holders:
        raise ValueError(f"{path} is named in a kit call but is in none of its mounts; pass it as an input")
    host, target = max(holders, key=lambda m: len(m[0].parts))
    rest = path.relative_to(host)
    return target if rest == Path(".") else f"{target}/{rest.as_posix()}"


def share(call: KitCall, data_dir: Path, jit: JitCache | None) -> None:
    """Let the container's user read the data and the call's inputs, and own its output folder.

    Where the host user is root the container runs as the image's user, and
    files written on the host (0600 by default for atomic writes) would be
    unreadable to it. Files and folders this host user owns are made
    readable to others (datasets, specs, weights: nothing secret); anything
    else is left as it is, and the process reports what it cannot read.
    """
    fresh_folder(call.output)
    uid, gid = container_user()
    if uid == os.getuid():
        return
    os.chown(call.output, uid, gid)
    call.output.chmod(0o700)
    if jit is not None:
        os.chown(jit.host, uid, gid)
    for root in (data_dir, *map(Path, call.inputs)):
        for path in (root, *(root.rglob("*") if root.is_dir() else ())):
            readable_by_others(path)


def readable_by_others(path: Path) -> None:
    """Add read (and, for a folder, search) permission for others to a path this host user owns."""
    with contextlib.suppress(OSError):
        st = path.stat()
        bits = 0o005 if path.is_dir() else 0o004
        if st.st_uid == os.getuid() and st.st_mode & bits != bits:
            path.chmod(st.st_mode | bits)

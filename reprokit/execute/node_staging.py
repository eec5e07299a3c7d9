"""What a Ray node stages before a run, once per node and checked: the dataset file, a user's script folder
and its extra requirements (their wheels into the node's per-user cache, then the set installed there once,
as on the head: reprokit/environments/requirement_sets.py), and under Docker the head's image. Each is copied
from the head's actor (reprokit/execute/cluster.py) and locked between the node's tasks; these functions run on
the nodes."""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import re
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.environments import requirement_sets
from reprokit.errors import UserError
from reprokit.kits.contract.files import atomic_file, clean_stale, write_text_atomic
from reprokit.kits.contract.spec import ScriptSpec, Spec
from reprokit.results import quarantine

if TYPE_CHECKING:
    from docker.client import DockerClient

CHUNK = 8 << 20


def _get(ref: Any) -> Any:
    import ray  # on a node, where Ray runs this task
    return ray.get(ref)


def script_files(specs: Sequence[Spec]) -> dict[str, str]:
    """What the head serves of the users' scripts, by name: every file of each script's folder (a node has
    no copy of it), and the wheels of its extra requirements, which the head installed its set from (its per-user
    cache's, under the set's folder name: a node takes those its set needs)."""
    files = {}
    for spec in specs:
        if not isinstance(spec, ScriptSpec):
            continue
        folder = Path(spec.script.folder)
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder)
            if path.is_file() and "__pycache__" not in rel.parts and not rel.parts[0].startswith("."):
                files[f"script/{_folder_key(spec)}/{rel.as_posix()}"] = str(path)
        install = spec.script.requirements.install if spec.script.requirements else None
        if install:
            named = requirement_sets.folder_for(install, spec.provenance).name
            files.update({f"wheels/{named}/{p.name}": str(p)
                          for p in requirement_sets.wheels_of(install, spec.provenance, spec.script.path)})
    return files


def _folder_key(spec: ScriptSpec) -> str:
    """A script folder's name on the nodes: the folder and the sha256 of the .py files the spec hashed."""
    body = json.dumps([spec.script.folder, spec.script.files], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock between the tasks of one node (a file lock in the node's folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _fetch(head: Any, name: str, dest: Path) -> None:
    """Copy one of the head's files here, chunk by chunk, through the object store."""
    size = _get(head.size.remote(name))
    clean_stale(dest.parent, dest.name)         # a copy a killed task left half-made (a dataset's size)
    with atomic_file(dest, "wb") as fh:
        for offset in range(0, size, CHUNK):
            fh.write(_get(head.read.remote(name, offset, CHUNK)))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def stage_data(head: Any, spec: Spec, data_dir: Path) -> bool:
    """The spec's dataset in this node's cache, checksum-verified once per node; True if it was copied now."""
    name, sha = spec.data.file, spec.data.sha256
    assert name is not None and sha is not None, "a spec that runs names its prepared data"
    path = data_dir / name
    verified = data_dir / ".verified" / f"{name}.sha256"
    with locked(data_dir / ".stage.lock"):
        if _verified(path, verified, sha):
            return False
        _fetch(head, f"data/{name}", path)
        got = _sha256(path)
        if got != sha:
            path.unlink()
            raise UserError(f"the dataset {name} staged to this node has sha256 {got[:12]}, not the "
                            f"{sha[:12]} of the spec; the copy was removed.")
        write_text_atomic(verified, sha)
        return True


def _verified(path: Path, marker: Path, sha: str) -> bool:
    """Whether the staged file was verified to have this sha256 and is unchanged since (not newer than the
    marker); a damaged marker is set aside, and the file is staged again."""
    try:
        text = marker.read_bytes()
        staged = path.stat().st_mtime_ns
    except FileNotFoundError:
        return False
    if not re.fullmatch(rb"[0-9a-f]{64}", text):
        quarantine.set_aside(marker, f"the staging marker of {path.name}", "not a sha256",
                             "the file will be staged again")
        return False
    return text.decode() == sha and marker.stat().st_mtime_ns >= staged


def stage_script(head: Any, spec: ScriptSpec, node_dir: Path) -> ScriptSpec:
    """The spec's script folder copied to this node once, and its extra requirements installed in the node's
    per-user cache once, from the head's wheels (each one this node lacks copied into its wheel cache, its hash
    checked by the install); the spec as this node runs it, its folder the copy (the probe checks the .py files
    against the spec's sha256)."""
    key = _folder_key(spec)
    folder = node_dir / "scripts" / key
    install = spec.script.requirements.install if spec.script.requirements else None
    with locked(node_dir / ".stage.lock"):
        names = _get(head.names.remote())
        _copy_once(head, names, f"script/{key}/", folder)
        if install and not requirement_sets.ready(requirement_sets.folder_for(install, spec.provenance), install):
            prefix = f"wheels/{requirement_sets.folder_for(install, spec.provenance).name}/"
            wheels = requirement_sets.wheels_folder()
            for name in (n for n in names if n.startswith(prefix)):
                if not (wheels / name[len(prefix):]).exists():
                    _fetch(head, name, wheels / name[len(prefix):])
            requirement_sets.install(install, spec.provenance, spec.script.path, log=lambda line: None)
    return dataclasses.replace(spec, script=dataclasses.replace(spec.script, folder=str(folder)))


def _copy_once(head: Any, names: list[str], prefix: str, root: Path) -> None:
    """The head's files named under prefix into root, once: a marker beside root says the copy is whole."""
    done = root.with_name(root.name + ".staged")
    if done.exists():
        return
    for name in (n for n in names if n.startswith(prefix)):
        dest = root / name[len(prefix):]
        dest.parent.mkdir(parents=True, exist_ok=True)
        _fetch(head, name, dest)
    write_text_atomic(done, "")


def stage_image(head: Any, image: dict[str, str], client: DockerClient, node_dir: Path) -> bool:
    """The head's image in this node's engine under its tag, with the same image id; True if loaded now."""
    import docker.errors

    def present() -> bool:
        try:
            return client.images.get(image["ref"]).id == image["id"]
        except docker.errors.ImageNotFound:
            return False

    with locked(node_dir / ".images.lock"):
        if present():
            return False
        host, port, token = _get(head.image_stream.remote(image["ref"]))
        with socket.create_connection((host, port), timeout=600) as conn:
            conn.sendall(token.encode())
            # docker-stubs says bytes or a reader; the SDK posts any iterable of bytes as a chunked body
            client.images.load(iter(lambda: conn.recv(CHUNK), b""))  # type: ignore[arg-type]
        if not present():
            raise UserError(f"the image {image['ref']} loaded on this node does not have the head's id "
                            f"{image['id'][:19]}.")
        return True

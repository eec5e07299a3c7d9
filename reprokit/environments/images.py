"""The kit's images: recipes, content tags, builds and base-digest pins.

One image per framework, built from ``docker/<framework>.Dockerfile`` with the
Docker SDK. An image's tag is a hash of everything that goes into it (the
Dockerfile, the lock file, the base reference and digest), so a changed lock
file or base yields a new tag and an unchanged one is never rebuilt.

    python -m reprokit.environments.images build [--framework F ...] [--flavor cuda|cuda12|cpu]
                                    [--base-override IMAGE] [--extra-ca PEM]
    python -m reprokit.environments.images tags  [--framework F ...] [--flavor ...] [--base-override ...]
    python -m reprokit.environments.images pin   [--framework F ...] [--dry-run]

``build`` sends a minimal context (the Dockerfile, docker/bases.toml, the lock
file, the optional extra CA), never the whole repository. ``pin`` asks the
registry, through the engine, for the current digest of each base tag and
rewrites the Dockerfile's ``ARG BASE_IMAGE=`` line (reprokit/environments/base_images.py).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.environments import cache
from reprokit.environments.base_images import (
    BASES_FILE,
    DIGEST_RE,
    PIN_COMMAND,
    REPO_ROOT,
    UNRESOLVED,
    base_of,
    load_bases,
    pin,
    split_ref,
)
from reprokit.environments.docker_client import client_or_error, short_reason
from reprokit.errors import UserError
from reprokit.kits.contract.names import CONTAINER_LABEL
from reprokit.kits.contract.names import FRAMEWORKS as FRAMEWORKS  # re-exported: reprokit.runners.choose reads it here

if TYPE_CHECKING:
    from docker.client import DockerClient
    from docker.models.images import Image

IMAGE_REPO = "reprokit"
EXTRA_CA_ENV = "REPROKIT_EXTRA_CA"
BASE_OVERRIDE_ENV = "REPROKIT_BASE_OVERRIDE"   # a local stand-in base for machines without the registry
BUILD_COMMAND = "nox -s images"

LABEL_BASE_NAME = "org.opencontainers.image.base.name"
LABEL_BASE_DIGEST = "org.opencontainers.image.base.digest"
LABEL_CONTENT = "org.reprokit.content-sha256"
LABEL_LOCK = "org.reprokit.lock-sha256"
LABEL_LOCK_NAME = "org.reprokit.lock"
LABEL_FRAMEWORK = "org.reprokit.framework"
LABEL_BASE_PINNED = "org.reprokit.base-pinned"

_FROM_STEP_RE = re.compile(r"^Step \d+/\d+ : FROM ", re.IGNORECASE)
_ID_LINE_RE = re.compile(r"^ ---> ([0-9a-f]{12,64})\s*$")

Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Recipe:
    """Everything that decides one image; its tag is a hash of it."""

    framework: str
    flavor: str
    dockerfile: Path
    lock: Path
    base_ref: str           # what FROM gets: repo:tag@sha256:... or a local override
    base_digest: str        # registry digest, or the local image id of an override
    base_pinned: bool       # False for a --base-override (a local stand-in, e.g. in CI)
    content_sha256: str

    @property
    def tag(self) -> str:
        # Named after the lock file, so flavors that share one (PyTorch's) share the image.
        name = re.sub(r"[^a-z0-9._-]+", "-", self.lock.stem.lower()).strip("-._") or self.framework
        return f"{IMAGE_REPO}/{name}:{self.content_sha256[:12]}"

    @property
    def lock_sha256(self) -> str:
        return hashlib.sha256(self.lock.read_bytes()).hexdigest()


def recipe(framework: str, flavor: str = "cuda", *, base_override: str | None = None,
           lock_override: Path | None = None, repo_root: Path = REPO_ROOT,
           client: DockerClient | None = None) -> Recipe:
    """Resolve what the image of one framework is made of; UserError if it cannot be built."""
    repo_root = Path(repo_root)
    bases = load_bases(repo_root)
    if framework not in bases:
        raise UserError(f"{BASES_FILE} has no entry for framework {framework!r}; "
                        f"choose one of {', '.join(sorted(bases))}.")
    entry = bases[framework]
    if flavor not in entry["locks"]:
        raise UserError(f"{framework} has no image flavor {flavor!r}; choose one of {', '.join(entry['locks'])}.")
    dockerfile = repo_root / entry["dockerfile"]
    if not dockerfile.is_file():
        raise UserError(f"{dockerfile} is missing; restore it from the repository.")
    lock = Path(lock_override) if lock_override else repo_root / entry["locks"][flavor]
    if not lock.is_file():
        raise UserError(f"the lock file {lock} is missing; create it with `nox -s lock`.")

    if base_override:
        if client is None:
            raise UserError("a base override needs a Docker engine to look the image up; start Docker first.")
        import docker.errors
        try:
            image_id = client.images.get(base_override).id
        except docker.errors.ImageNotFound:
            raise UserError(f"the base override image {base_override} is not in the local engine; build it "
                            f"(for the CI stand-in: scripts/build-test-base-image {base_override}).") from None
        assert image_id is not None                 # an image the engine found has an id
        base_digest, base_ref, pinned = image_id, base_override, False
    else:
        base_ref = base_of(dockerfile)
        name, digest = split_ref(base_ref)
        if digest is None or digest == UNRESOLVED or not DIGEST_RE.match(digest):
            raise UserError(f"the base image of {dockerfile.name} ({name}) has no resolved digest; "
                            f"run `{PIN_COMMAND}` on a machine that reaches its registry to pin it.")
        base_digest, pinned = digest, True

    h = hashlib.sha256()
    for part in (framework, base_ref, base_digest):
        h.update(part.encode() + b"\0")
    for path in (dockerfile, repo_root / BASES_FILE, lock):
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return Recipe(framework, flavor, dockerfile, lock, base_ref, base_digest, pinned, h.hexdigest())


def read_extra_ca(path: str | Path | None) -> bytes | None:
    """The optional extra CA bundle (PEM) for builds behind a TLS-re-signing proxy."""
    if path is None:
        path = os.environ.get(EXTRA_CA_ENV) or None
    if path is None:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read the extra CA file {path} ({exc.strerror}); give a readable PEM file "
                        f"with --extra-ca or {EXTRA_CA_ENV}.") from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise UserError(f"the extra CA file {path} holds no PEM certificate; give a PEM bundle "
                        f"(e.g. /etc/ssl/certs/ca-certificates.crt).")
    return data


def _context(r: Recipe, repo_root: Path, extra_ca: bytes | None) -> io.BytesIO:
    """A tar build context mirroring the repository paths the Dockerfile names."""
    buf = io.BytesIO()
    lock_name = "locks/reprokit-build.lock.txt"

    def add(name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o644, 0
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(fileobj=buf, mode="w") as tar:
        add("Dockerfile", r.dockerfile.read_bytes())
        add(BASES_FILE, (Path(repo_root) / BASES_FILE).read_bytes())
        add(lock_name, r.lock.read_bytes())
        if extra_ca:
            add("docker/extra-ca.pem", extra_ca)
    buf.seek(0)
    return buf


def find(r: Recipe, client: DockerClient) -> Image | None:
    """The built image for a recipe, or None."""
    import docker.errors
    try:
        return client.images.get(r.tag)
    except docker.errors.ImageNotFound:
        return None


def _log_path(folder: Path, name: str) -> Path:
    """folder/name if it can be written, else the same name in a per-user temporary folder."""
    for candidate in (folder, Path(tempfile.gettempdir()) / f"reprokit-logs-{os.getuid()}"):
        try:
            candidate.mkdir(parents=True, exist_ok=True)
            path = candidate / name
            path.touch()
            return path
        except OSError:
            continue
    raise UserError(f"cannot write a build log in {folder} or the temporary folder; free some disk space.")


def build(r: Recipe, client: DockerClient, *, extra_ca: bytes | None = None, repo_root: Path = REPO_ROOT,
          log: Log = _stderr, log_dir: Path | None = None) -> Image:
    """Build one image with the classic builder; UserError with the failing step when it fails."""
    import docker.errors
    import requests

    log_path = _log_path(Path(log_dir) if log_dir else cache.root() / "logs",      # beside the images' envs' cache
                         f"build-{r.framework}-{r.flavor}.log")
    buildargs = {"BASE_IMAGE": r.base_ref, "BASE_DIGEST": r.base_digest,
                 "LOCK_FILE": "locks/reprokit-build.lock.txt"}
    labels = {CONTAINER_LABEL: "1", LABEL_FRAMEWORK: r.framework, LABEL_LOCK_NAME: r.lock.name,
              LABEL_CONTENT: r.content_sha256, LABEL_LOCK: r.lock_sha256,
              LABEL_BASE_PINNED: "true" if r.base_pinned else "false"}
    log(f"building {r.tag} from {r.dockerfile.name} on {r.base_ref} (log: {log_path})")
    started = time.monotonic()
    errors: list[str] = []
    tail: list[str] = []
    image_id: str | None = None
    try:
        with open(log_path, "w") as fh:
            stream = client.api.build(
                fileobj=_context(r, repo_root, extra_ca), custom_context=True, dockerfile="Dockerfile",
                tag=r.tag, buildargs=buildargs, labels=labels, rm=True, forcerm=True, decode=True)
            for chunk in stream:
                text = chunk.get("stream") or chunk.get("status") or ""
                if text:
                    fh.write(text if text.endswith("\n") else text + "\n")
                    for line in text.splitlines():
                        if line.strip():
                            tail = (tail + [line.rstrip()])[-20:]
                            if line.startswith("Step "):
                                log(f"  {line.strip()}")
                if "error" in chunk:
                    errors.append(chunk["error"].strip())
                    fh.write(f"ERROR: {chunk['error']}\n")
                aux = chunk.get("aux")
                if isinstance(aux, dict) and "ID" in aux:
                    image_id = aux["ID"]
    except docker.errors.APIError as exc:
        errors.append(short_reason(exc))
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:  # engine went away
        errors.append(f"the Docker engine stopped answering ({short_reason(exc)})")
    if errors:
        step = next((line for line in reversed(tail) if line.startswith("Step ")), None)
        where = f" at {step.strip()}" if step else ""
        raise UserError(f"building {r.tag} failed{where}: {errors[-1][:400]}; the full log is {log_path}.")
    image = find(r, client)
    if image is None:  # pragma: no cover - the engine said it built but has no such tag
        raise UserError(f"building {r.tag} reported success but the engine has no such image "
                        f"(id {image_id}); see {log_path}.")
    log(f"built {r.tag} ({image.short_id}) in {time.monotonic() - started:.0f} s")
    remove_stages(client, builder_stages(log_path.read_text()))
    return image


def remove_stages(client: DockerClient, stage_ids: list[str]) -> None:
    """Drop the builder stages' untagged images: they held the extra CA and duplicate the virtualenv.

    The final image never contains them; removing them also keeps the CA out
    of the local engine's cache and halves the disk a build needs.
    """
    import docker.errors
    for stage_id in stage_ids:
        with contextlib.suppress(docker.errors.APIError):   # shared with another image, or already gone
            client.images.remove(stage_id, noprune=False)


def builder_stages(log_text: str) -> list[str]:
    """The ids of the builder stages' last images, from a classic-builder log."""
    stages, last_id = [], None
    for line in log_text.splitlines():
        if _FROM_STEP_RE.match(line) and last_id:
            stages.append(last_id)
        elif m := _ID_LINE_RE.match(line):
            last_id = m.group(1)
    return stages


def ensure(r: Recipe, client: DockerClient, *, build_missing: bool = True, extra_ca: bytes | None = None,
           repo_root: Path = REPO_ROOT, log: Log = _stderr) -> Image:
    """The image for a recipe, built if missing and allowed; UserError otherwise."""
    image = find(r, client)
    if image is not None:
        return image
    if not build_missing:
        raise UserError(f"the image {r.tag} is missing; build it with `{BUILD_COMMAND}`.")
    return build(r, client, extra_ca=extra_ca, repo_root=repo_root, log=log)


def pinned(ref: str, client: DockerClient) -> Image:
    """An image that must already be in this engine (staged there); UserError otherwise."""
    import docker.errors
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        raise UserError(f"the image {ref} is not in this Docker engine; stage or build it first.") from None


def image_facts(image: Any) -> dict[str, Any]:
    """What a result records about the image a run came from (a docker.models.images.Image; the Docker runner
    holds its images as objects)."""
    labels = image.labels or {}
    base_name = labels.get(LABEL_BASE_NAME, "")
    base_digest = labels.get(LABEL_BASE_DIGEST) or split_ref(base_name)[1]
    return {
        "ref": image.tags[0] if image.tags else None,
        "id": image.id,
        "base": base_name or None,
        "base_digest": base_digest or None,
        "base_pinned": labels.get(LABEL_BASE_PINNED) == "true",
        "lock": labels.get(LABEL_LOCK_NAME),
        "lock_sha256": labels.get(LABEL_LOCK),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reprokit.environments.images",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (("build", "build the images that are missing"),
                           ("tags", "print the image tags (JSON) without building"),
                           ("pin", "resolve and rewrite the base image digests")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--framework", action="append", choices=FRAMEWORKS,
                       help="framework (repeatable; default: all)")
        if name == "pin":
            p.add_argument("--dry-run", action="store_true", help="print, do not rewrite")
            continue
        p.add_argument("--flavor", default="cuda",
                       help="cuda: the GPU images (default); cpu: CPU-only lock files (CI); cuda12: PyTorch's "
                            "CUDA 12 build for drivers older than 580 (built on demand)")
        p.add_argument("--base-override", metavar="IMAGE", default=os.environ.get(BASE_OVERRIDE_ENV) or None,
                       help=f"build on this local image instead of the pinned base (CI stand-in; "
                            f"default ${BASE_OVERRIDE_ENV})")
        if name == "build":
            p.add_argument("--extra-ca", metavar="PEM",
                           help=f"extra CA bundle for pip behind a TLS-re-signing proxy (or {EXTRA_CA_ENV}); "
                                "used in the builder stage only, never in the final image")
            p.add_argument("--rebuild", action="store_true", help="build even if the tag exists")
    args = parser.parse_args(argv)
    frameworks = args.framework or list(FRAMEWORKS)
    if not args.framework and args.command != "pin":     # a flavor only some frameworks have: theirs
        frameworks = [fw for fw in frameworks if args.flavor in load_bases()[fw]["locks"]] or frameworks
    try:
        if args.command == "pin":
            pin(frameworks, dry_run=args.dry_run)
            return 0
        client = client_or_error()
        recipes = [recipe(fw, args.flavor, base_override=args.base_override, client=client) for fw in frameworks]
        if args.command == "tags":
            print(json.dumps({r.framework: r.tag for r in recipes}, indent=1))
            return 0
        extra_ca = read_extra_ca(args.extra_ca)
        for r in recipes:
            if args.rebuild or find(r, client) is None:
                build(r, client, extra_ca=extra_ca)
            else:
                _stderr(f"{r.tag} exists; nothing to build")
        return 0
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

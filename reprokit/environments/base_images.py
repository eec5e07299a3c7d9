"""The bases the kit's images are built on: docker/bases.toml and the digest each Dockerfile pins.

docker/bases.toml names, per framework, its Dockerfile, lock files and GPU
requirements; each Dockerfile pins its base in one ``ARG BASE_IMAGE=repo:tag@sha256:...``
line. An image's recipe (reprokit/environments/images.py) reads both; ``pin``
(`nox -s pin`, or ``python -m reprokit.environments.images pin``) asks the
registry, through the engine, for the current digest of each base tag and
rewrites that line. Kept apart from the builds: the host checks and the
environments read the same file, and pinning builds nothing.
"""
from __future__ import annotations

import re
import sys
import time
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit import resources
from reprokit.environments.docker_client import client_or_error, short_reason
from reprokit.errors import UserError
from reprokit.kits.contract.names import FRAMEWORKS

if TYPE_CHECKING:
    from docker.client import DockerClient

REPO_ROOT = resources.root()          # where docker/ and locks/ are: the clone's top, or the wheel's copy
BASES_FILE = "docker/bases.toml"
UNRESOLVED = "sha256:UNRESOLVED"
PIN_COMMAND = "nox -s pin"

_ARG_RE = re.compile(r"^ARG BASE_IMAGE=(?P<ref>\S+)\s*$", re.MULTILINE)
_PIN_NOTE_RE = re.compile(r"^# base-pin: .*$", re.MULTILINE)
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")

Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def load_bases(repo_root: Path = REPO_ROOT) -> dict[str, Any]:
    """docker/bases.toml: per framework its Dockerfile, lock files and GPU requirements."""
    path = Path(repo_root) / BASES_FILE
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path} is missing; reinstall reprokit (pipx reinstall reprokit), or in a clone restore it "
                        f"with git checkout {BASES_FILE}.") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path} is not valid TOML ({exc}); fix the file or restore it with git checkout.") from None


def base_of(dockerfile: Path) -> str:
    """The base image reference pinned in a Dockerfile's ``ARG BASE_IMAGE=`` line."""
    match = _ARG_RE.search(Path(dockerfile).read_text())
    if match is None:
        raise UserError(f"{dockerfile} has no `ARG BASE_IMAGE=...` line; restore it from the repository.")
    return match.group("ref")


def split_ref(ref: str) -> tuple[str, str | None]:
    """('repo:tag', 'sha256:...') from 'repo:tag@sha256:...'; digest None when absent."""
    name, _, digest = ref.partition("@")
    return name, (digest or None)


def pin(frameworks: Iterable[str] = FRAMEWORKS, *, client: DockerClient | None = None, repo_root: Path = REPO_ROOT,
        dry_run: bool = False, resolve: Callable[[str], str] | None = None, log: Log = _stderr) -> dict[str, str]:
    """Resolve each base tag's current digest on its registry and rewrite the Dockerfiles."""
    bases = load_bases(repo_root)
    if resolve is None:
        client = client or client_or_error()

        def resolve(name: str) -> str:
            return client.images.get_registry_data(name).id

    done: dict[str, str] = {}
    for fw in frameworks:
        dockerfile = Path(repo_root) / bases[fw]["dockerfile"]
        text = dockerfile.read_text()
        name, old = split_ref(base_of(dockerfile))
        try:
            digest = resolve(name)
        except _resolve_errors() as exc:
            raise UserError(f"could not resolve {name} on its registry ({short_reason(exc)}); run `{PIN_COMMAND}` "
                            f"on a machine whose Docker engine reaches the registry.") from None
        if not DIGEST_RE.match(digest or ""):
            raise UserError(f"the registry answered {digest!r} for {name}, which is not a sha256 digest.")
        ref = f"{name}@{digest}"
        note = (f"# base-pin: index digest of {name} resolved on its registry by `{PIN_COMMAND}` "
                f"on {time.strftime('%Y-%m-%d', time.gmtime())}")
        new = _ARG_RE.sub(f"ARG BASE_IMAGE={ref}", text, count=1)
        new = _PIN_NOTE_RE.sub(note, new, count=1) if _PIN_NOTE_RE.search(new) else new
        log(f"{dockerfile.name}: {name} {old or '(none)'} -> {digest}" + (" (dry run)" if dry_run else ""))
        if not dry_run and new != text:
            dockerfile.write_text(new)
        done[fw] = ref
    return done


def _resolve_errors() -> tuple[type[BaseException], ...]:
    """What resolving a digest may raise: the caller's own, and the Docker SDK's where it is installed."""
    return (OSError, ValueError, *_docker_errors())


def _docker_errors() -> tuple[type[BaseException], ...]:
    try:
        import docker.errors
        import requests
    except ImportError:
        return ()
    return (docker.errors.DockerException, requests.exceptions.RequestException)


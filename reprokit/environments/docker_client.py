"""The Docker engine's client for the image builds and the runners: one that answers, or a UserError that says how
to get one.

Kept apart from the images so that everything that talks to the engine (builds, base pins, the host checks, the
Docker runner) asks for it, and names a failure to reach it, the same way.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from reprokit.errors import UserError

if TYPE_CHECKING:
    from docker.client import DockerClient


def client_or_error() -> DockerClient:
    """A Docker client that answers, or UserError saying how to get one."""
    try:
        import docker
    except ImportError:
        raise UserError("the Docker SDK for Python is not installed; install it with `pip install docker`.") from None
    import requests
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:  # all mean "no engine"
        raise UserError(f"no Docker engine answers ({short_reason(exc)}); start it (`sudo systemctl start docker`, "
                        f"or scripts/start-dockerd) or use --backend local.") from None
    return client


def short_reason(exc: BaseException) -> str:
    """The root cause in a few words: the Docker SDK wraps socket errors in several layers of repr."""
    root = exc
    while (parent := root.__cause__ or root.__context__) is not None:
        root = parent
    if isinstance(root, FileNotFoundError):
        return "no Docker socket here"
    if isinstance(root, ConnectionRefusedError):
        return "the Docker socket refuses connections"
    if isinstance(root, PermissionError):
        return "no permission to use the Docker socket"
    text = str(exc).strip().splitlines()
    return (text[-1] if text else type(exc).__name__)[:300]

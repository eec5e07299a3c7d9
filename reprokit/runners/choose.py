"""Which runner a matrix uses, and why: Docker where it can work here, else the local runner.

The CLI calls ``choose`` once and from then on only talks to the ``Runner`` it
got; the reason is printed, so a fallback is never silent.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from reprokit.environments import base_images, docker_client, host_checks, images
from reprokit.errors import UserError
from reprokit.runners import container_limits
from reprokit.runners.base import Runner
from reprokit.runners.make import make

if TYPE_CHECKING:
    from docker.client import DockerClient


def choose(*, backend: str, python: Path | None, gpus: str, gpus_explicit: bool, device: str, repo_root: Path,
           envs_root: Path, data_dir: Path, extra_dirs: tuple[Path, ...], frameworks: Iterable[str],
           flavors: dict[str, host_checks.Flavor] | None = None, visible_gpus: str | None = None,
           dry_run: bool = False, memory_limit: str = "auto") -> tuple[Runner, str]:
    """(runner, why). ``backend`` is auto, docker or local; ``python`` (--python) means a given interpreter;
    ``flavors`` the GPU build each framework runs; ``visible_gpus`` what a local run's CUDA may see;
    ``memory_limit`` each container's (--memory-limit, refused here if not understood, whichever runner). A dry
    run of --backend docker asks nothing of an engine: the images are described from their recipes."""
    container_limits.memory_option(memory_limit)

    def local() -> Runner:
        return make("local", data_dir=data_dir, device=device, python=python, extra_dirs=extra_dirs,
                    flavors=flavors, visible_gpus=visible_gpus, envs_root=envs_root)

    if python is not None or backend == "local":
        return local(), "--python given" if python is not None else "asked for"
    ok, why = host_checks.engine_status()
    if not ok:
        if backend == "docker" and dry_run:
            return (make("docker", data_dir=data_dir, device=device, gpus=gpus, extra_dirs=extra_dirs,
                         flavors=flavors, repo_root=repo_root, mem_limit=memory_limit),
                    f"asked for; a dry run, so the engine was not needed ({why.rstrip('.')})")
        if backend == "docker":
            raise UserError(why)
        return local(), why
    return select(repo_root, data_dir, gpus, extra_dirs, device, forced=backend == "docker",
                  gpus_explicit=gpus_explicit, frameworks=sorted(frameworks), local=local, flavors=flavors,
                  memory_limit=memory_limit)


def select(repo_root: Path, data_dir: Path, gpus: str | list[str] | None,
           extra_dirs: Sequence[Path] = (), device: str | None = None, *, forced: bool = False,
           gpus_explicit: bool | None = None, frameworks: Iterable[str] = images.FRAMEWORKS,
           base_override: str | None = None, client: DockerClient | None = None,
           log: Callable[[str], None] = print, local: Callable[[], Runner] | None = None,
           flavors: dict[str, host_checks.Flavor] | None = None,
           memory_limit: str = "auto") -> tuple[Runner, str]:
    """(runner, reason): the Docker runner where it can work here, else the local runner and why.

    Called once a Docker engine answers. With ``forced`` (--backend docker)
    or explicitly requested GPUs, what stops Docker is a UserError instead of
    a fallback; otherwise ``local()`` gives the runner to fall back to. Checks,
    in order: GPUs requested but no NVIDIA container runtime; an image that
    cannot be described (missing lock file, unresolved base digest); an image
    that is missing and whose base can be neither found locally nor pulled.
    """
    gpus = host_checks.parse_gpus(gpus or "none")
    strict = forced or bool(gpus_explicit)
    client = client or docker_client.client_or_error()

    def fallback(why: str) -> tuple[Runner, str]:
        if forced or local is None:
            raise UserError(why)
        return local(), why

    if gpus != "none" and not host_checks.nvidia_runtime_available(client):
        if strict:
            raise UserError(f"GPUs were requested (--gpus {gpus if isinstance(gpus, str) else ','.join(gpus)}) "
                            f"but this Docker engine has no NVIDIA container runtime; {host_checks.TOOLKIT_FIX}.")
        return fallback("the Docker engine has no NVIDIA container runtime for this host's GPU; install "
                        "nvidia-container-toolkit to run in the pinned images")
    runner = make("docker", data_dir=data_dir, device=device or "cpu", gpus=gpus, extra_dirs=tuple(extra_dirs),
                  flavors=flavors, repo_root=repo_root, base_override=base_override, client=client, log=log,
                  mem_limit=memory_limit)
    try:
        recipes = [runner.recipe(fw) for fw in frameworks]
    except UserError as exc:
        return fallback(str(exc).rstrip("."))
    missing = [r for r in recipes if images.find(r, client) is None]
    for r in missing:
        if r.base_pinned and not _local_image(client, r.base_ref) and not _registry_reachable(client, r.base_ref):
            return fallback(f"the image {r.tag} is missing and its base {base_images.split_ref(r.base_ref)[0]} can "
                            f"neither be found locally nor pulled; build it with `{images.BUILD_COMMAND}` where "
                            f"the registry is reachable")
    engine = client.version().get("Version", "?")
    state = (f"to build: {', '.join(r.tag for r in missing)}" if missing
             else f"images {', '.join(r.tag for r in recipes)}")
    return runner, f"Docker engine {engine} answers; {state}; GPUs: {runner.gpus_text()}"


def _registry_reachable(client: DockerClient, ref: str) -> bool:
    import docker.errors
    import requests
    try:
        client.images.get_registry_data(ref)
        return True
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return False


def _local_image(client: DockerClient, ref: str) -> bool:
    import docker.errors
    try:
        client.images.get(ref)
        return True
    except docker.errors.APIError:       # ImageNotFound included
        return False

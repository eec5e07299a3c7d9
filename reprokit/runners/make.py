"""The one place a runner is built, whichever caller (the CLI's choice, a Ray head or node) asks for it."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from reprokit import resources
from reprokit.environments import host_checks
from reprokit.environments.envs import ENVS
from reprokit.runners.base import Runner

if TYPE_CHECKING:       # imported when one is made: the Docker runner's module wants the SDK only then
    from reprokit.runners.docker import DockerRunner
    from reprokit.runners.local import LocalRunner


def user_mounts(extra_dirs: tuple[Path, ...]) -> list[tuple[Path, str]]:
    """Where a container sees each --experiments folder."""
    return [(Path(d), f"/opt/reprokit/user/{i}") for i, d in enumerate(extra_dirs)]


# The kind names the class, so a caller that needs one runner's own methods (the Docker runner's recipe) has it.
@overload
def make(kind: Literal["local"], *, data_dir: Path, device: str, gpus: str | list[str] = ...,
         extra_dirs: tuple[Path, ...] = ..., python: Path | None = ...,
         flavors: dict[str, host_checks.Flavor] | None = ..., visible_gpus: str | None = ...,
         envs_root: Path = ..., repo_root: Path | None = ..., **docker: Any) -> LocalRunner: ...


@overload
def make(kind: Literal["docker"], *, data_dir: Path, device: str, gpus: str | list[str] = ...,
         extra_dirs: tuple[Path, ...] = ..., python: Path | None = ...,
         flavors: dict[str, host_checks.Flavor] | None = ..., visible_gpus: str | None = ...,
         envs_root: Path = ..., repo_root: Path | None = ..., **docker: Any) -> DockerRunner: ...


def make(kind: str, *, data_dir: Path, device: str, gpus: str | list[str] = "none",
         extra_dirs: tuple[Path, ...] = (), python: Path | None = None,
         flavors: dict[str, host_checks.Flavor] | None = None, visible_gpus: str | None = None,
         envs_root: Path = ENVS, repo_root: Path | None = None, **docker: Any) -> Runner:
    """A ``kind`` ("docker" or "local") runner; ``docker`` passes the Docker runner's own options on.
    ``repo_root``: the folder of docker/ and locks/ (default: the kit's own, reprokit/resources.py)."""
    if kind == "local":
        from reprokit.runners.local import LocalRunner
        return LocalRunner(envs_root, data_dir, device, python=python, extra_paths=extra_dirs, flavors=flavors,
                           visible_gpus=visible_gpus)
    if kind == "docker":
        from reprokit.runners.docker import DockerRunner
        return DockerRunner(repo_root or resources.root(), data_dir, gpus, user_mounts(extra_dirs), flavors=flavors,
                            **docker)
    raise ValueError(f"no runner named {kind!r}")

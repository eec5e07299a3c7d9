"""Creating and starting one container, and the engine's reason where it cannot.

A container the engine refuses to start (a bad device request, a runtime
error) is removed at once and its run fails with the engine's own words, as
`docker run` would exit 125; the one refusal a run can go on without, a
memlock ulimit the engine may not raise, is retried once without it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reprokit.runners import engine

if TYPE_CHECKING:
    from docker.client import DockerClient
    from docker.models.containers import Container


class StartFailed(Exception):
    """The engine refused to start a container (bad device request, runtime error)."""


def start(client: DockerClient, config: dict[str, Any], launcher: dict[str, Any],
          without_memlock: Callable[[], None]) -> Container:
    """Create and start the container; StartFailed with the engine's reason if it cannot start.

    Where the engine may not raise RLIMIT_MEMLOCK (dockerd itself runs
    with a capped hard limit, e.g. inside another container), the run
    goes on without that one ulimit, says so once, and records it.
    """
    import docker.errors
    for attempt in range(2):
        container = client.containers.create(**config)
        assert container.id is not None, "a created container has an id"
        launcher["container"]["id"] = container.id[:12]
        launcher["container"]["ulimits"] = {u["Name"]: u["Hard"] for u in config["ulimits"]}
        try:
            container.start()
            return container
        except docker.errors.APIError as exc:
            engine.remove(client, container, config["name"])
            reason = str(exc.explanation or exc)
            if attempt == 0 and "rlimit" in reason and any(u["Name"] == "memlock" for u in config["ulimits"]):
                without_memlock()       # the runner's later containers go without it too, and it says so once
                config["ulimits"] = [u for u in config["ulimits"] if u["Name"] != "memlock"]
                continue
            launcher["container"]["start_error"] = reason
            raise StartFailed(reason) from None
    raise AssertionError("unreachable")  # pragma: no cover

"""The Docker engine as a run meets it: whether it answers or is going away, what broke a connection, and
removing a container whatever state the engine is in.

dockerd may die or restart in the middle of a matrix, and a container of thousands of processes (a fork
bomb at its pids limit) takes it seconds to kill, so every wait here is bounded.
"""
from __future__ import annotations

import contextlib
import re
import time
from typing import TYPE_CHECKING

from reprokit.kits.contract.names import CONTAINER_LABEL
from reprokit.runners import owners

if TYPE_CHECKING:
    from docker.client import DockerClient
    from docker.models.containers import Container

PROBE_S = 5.0             # one ping or one forced removal never waits longer
SETTLE_S = 5.0            # a stopping engine closes its API within seconds of killing its containers
REMOVE_WITHIN_S = 60      # how long removing a run's container may take before it is named as left over


def leftovers(client: DockerClient) -> list[Container]:
    """Containers this kit started and did not remove (e.g. after a killed orchestrator)."""
    return client.containers.list(all=True, filters={"label": CONTAINER_LABEL})


def remove_orphans(client: DockerClient, containers: list[Container]) -> list[Container]:
    """Stop and remove those of the containers whose owner on this host has ended (an orchestrator killed with
    kill -9: its container trains on beside the next command's runs, then stays); the ones removed."""
    return [c for c in containers if owners.gone(c.labels) and remove(client, c, c.name or "")]


def is_timeout(exc: BaseException) -> bool:
    import requests
    if isinstance(exc, (requests.exceptions.ReadTimeout, requests.exceptions.Timeout)):
        return True
    return isinstance(exc, requests.exceptions.ConnectionError) and "timed out" in str(exc).lower()


def connection_broken(exc: BaseException) -> bool:
    """The engine's connection broke, was cut mid-answer or is refused (dockerd died or restarts), as opposed to
    a read timeout (the run's own)."""
    import requests
    broken = (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError)
    return isinstance(exc, broken) and not is_timeout(exc)


def broken_because(exc: BaseException) -> str:
    """A broken connection's cause in a few words: 'Connection aborted', 'Connection refused', 'Response ended
    prematurely' (the requests and urllib3 errors nest theirs)."""
    errno = re.search(r"\[Errno \d+\] ([^'\")]+)", str(exc))
    if errno:
        return errno.group(1).strip()
    cause: object = exc
    while isinstance(cause, BaseException) and cause.args:
        cause = cause.args[0]
    return str(cause).strip(" .")[:80] or type(exc).__name__


def answers(client: DockerClient) -> bool:
    import requests
    try:
        return client.api.get(f"{client.api.base_url}/_ping", timeout=PROBE_S).ok
    except requests.exceptions.RequestException:
        return False


def going_away(client: DockerClient) -> bool:
    """Whether the engine stops answering within SETTLE_S (it is going away)."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        if not answers(client):
            return True
        time.sleep(0.2)
    return False


def remove_now(client: DockerClient, name: str) -> None:
    """The second Ctrl-C: force-remove a run's container, waiting at most PROBE_S for the engine."""
    with contextlib.suppress(Exception):
        client.api.delete(f"{client.api.base_url}/v{client.api.api_version}/containers/{name}",
                          params={"force": "1"}, timeout=PROBE_S)


def kill(container: Container) -> None:
    import docker.errors
    with contextlib.suppress(docker.errors.APIError):   # it ended by itself in the meantime
        container.kill()


def remove(client: DockerClient, container: Container | None, name: str) -> bool:
    """Remove the run's container whatever happened (find it by name if create was interrupted); False if the
    engine would not, so it is left over."""
    import docker.errors
    import requests
    # A container of thousands of processes (a fork bomb at its pids limit) takes the engine seconds to kill,
    # and a removal may time out or find one already under way: try until it is gone, within a bound.
    deadline = time.monotonic() + REMOVE_WITHIN_S
    while True:
        try:
            (container or client.containers.get(name)).remove(force=True)
            return True
        except KeyboardInterrupt:
            continue                     # a second Ctrl-C must not leave the container behind
        except docker.errors.NotFound:
            return True
        except requests.exceptions.ConnectionError as exc:
            if not is_timeout(exc):
                return False             # no engine to ask: the container is named, and removed once it answers
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            if "No such container" in str(exc):
                return True              # else "removal already in progress", or the engine timed out: look again
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)

"""Who started a container: a process of one host, told apart from a later process given the same pid.

A container outlives an orchestrator killed with ``kill -9``, and one engine may serve several hosts. Each
container is labelled with its owner (host name, pid, and that pid's start time, which a reused pid does not
share), so the next command on that host can tell the containers of the gone from those of the living.
"""
from __future__ import annotations

import os
import socket

LABEL_HOST = "reprokit.owner.host"
LABEL_PID = "reprokit.owner.pid"
LABEL_STARTED = "reprokit.owner.started"       # field 22 of /proc/<pid>/stat: clock ticks after boot


def started(pid: int) -> str | None:
    """When a process started, in clock ticks after boot; None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]    # after the command's name, which may hold spaces and ")"


def labels() -> dict[str, str]:
    """The owner labels of a container this process starts."""
    pid = os.getpid()
    return {LABEL_HOST: socket.gethostname(), LABEL_PID: str(pid), LABEL_STARTED: started(pid) or ""}


def gone(container_labels: dict[str, str]) -> bool:
    """Whether a container's owner was a process of this host that has ended. False for another host's, or for
    a container without owner labels (an older kit's): nobody here can tell whether its owner lives."""
    host, pid = container_labels.get(LABEL_HOST), container_labels.get(LABEL_PID, "")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    recorded = container_labels.get(LABEL_STARTED)
    if not recorded:                    # started where /proc could not be read: only the pid can be asked
        return not _exists(int(pid))
    return started(int(pid)) != recorded


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:             # another user's
        return True
    return True


def describe(container_labels: dict[str, str]) -> str:
    """ "pid 4242 on host-a" """
    return f"pid {container_labels.get(LABEL_PID, '?')} on {container_labels.get(LABEL_HOST, 'an unknown host')}"

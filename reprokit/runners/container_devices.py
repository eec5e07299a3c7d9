"""What one container needs to hold a run at N devices (--devices N): shared memory for its ranks, and NCCL's
environment. A run at N is one container with its N GPUs (the runner's device requests), whose ranks the script's
launcher starts inside it.

Shared memory. NVIDIA's ``--shm-size=1g`` (NCCL's troubleshooting guide, "Docker": "--shm-size=1g --ulimit
memlock=-1"; its Deep Learning Frameworks guide) is sized for one training process. A run at N holds N ranks in
the container, each with its own data-loader workers, which pass their batches through /dev/shm (PyTorch's Docker
note: "PyTorch uses shared memory to share data between processes ... increase shared memory size either with
--ipc=host or --shm-size"), and NCCL's segments between the ranks (where it runs short, NCCL stops at its start:
"failed to extend /dev/shm/nccl-... to 4194660 bytes"). So 1 GiB per device. ``--ipc=host`` would hand the
container the host's /dev/shm instead, where it could read and write the segments of the host's and other
containers' processes: not least privilege. The size is a cap, not a reservation: a tmpfs page is charged to the
container's memory cgroup when it is written, inside the container's memory limit.

NCCL's environment, at N > 1 only, and nothing that reaches past the container (it has no network but its
loopback):

- ``NCCL_DEBUG=WARN``: NCCL says why before it returns an error (its troubleshooting guide), and the run's log
  tail keeps it.
- ``NCCL_SOCKET_IFNAME=lo`` and ``GLOO_SOCKET_IFNAME=lo``: every rank is in this container, whose one interface
  is its loopback (``network_mode: none``); NCCL's bootstrap and gloo would otherwise search for one first (gloo
  by the container's hostname, which such a container does not map to an address).

NCCL's transports between the GPUs (NVLink, PCIe, its shared memory) stay its own choice. A script that sets
these variables itself wins: they are the container's environment, which the script's ``os.environ`` may change.
"""
from __future__ import annotations

from typing import Any

SHM_PER_DEVICE = 1 << 30           # NVIDIA's --shm-size=1g, for each rank of a run
RANKS_ENVIRONMENT = {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}


def shm_bytes(devices: int, base: int = SHM_PER_DEVICE) -> int:
    """The container's /dev/shm for a run at ``devices``: ``base`` (the runner's --shm-size) per device."""
    return base * max(1, devices)


def environment(devices: int) -> dict[str, str]:
    """The variables a run at ``devices`` gets for its ranks (none at one device: it is one process)."""
    return dict(RANKS_ENVIRONMENT) if devices > 1 else {}


def facts(devices: int, shm: int) -> dict[str, Any]:
    """What a result records of it (launcher.container): the shared memory, and the variables set for its ranks."""
    out: dict[str, Any] = {"shm_bytes": shm}
    if devices > 1:
        out["ranks_environment"] = environment(devices)
    return out

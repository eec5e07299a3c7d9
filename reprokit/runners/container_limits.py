"""How much of its host one container may take: processes and memory.

Containers run code the kit did not write (a user's script), so a fork bomb or
a leak must end as that run's failure, never take the host down with it: the
orchestrator that records the result, dockerd, a login.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from reprokit.errors import UserError

# The pids cgroup counts threads, not only processes, and training needs few. Measured on 2 CPUs: PyTorch
# with 16 DataLoader workers peaks at 66 tasks, a Keras fit on tf.data at 13. Both grow by a few threads per core
# (PyTorch's intra- and inter-op pools; TensorFlow's intra-op, inter-op and tf.data pools): about 100 tasks on a
# 16-core GPU box, a few hundred on 128 cores. 4096 leaves 10x room on the largest boxes and is an eighth of
# Linux's smallest pid_max (32768), so a fork bomb cannot fill the host's process table.
PIDS_LIMIT = 4096

# auto: three quarters of the engine host's memory. The quarter left is for what must outlive a runaway
# run (the orchestrator, dockerd, the page cache that holds the dataset, a login); one experiment's run
# rarely needs more, and --memory-limit SIZE or none says otherwise.
AUTO_SHARE = 0.75
DOCKER_MINIMUM = 6 << 20             # the engine refuses less ("Minimum memory limit allowed is 6MB")
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([kmgt])i?b?", re.IGNORECASE)


@dataclass(frozen=True)
class MemoryOption:
    """--memory-limit as understood: auto, a size in bytes, or none."""
    text: str
    size: int | None            # bytes for a SIZE; None for auto and none

    @property
    def auto(self) -> bool:
        return self.text == "auto"

    def bytes_for(self, host_total: int) -> int | None:
        """Each container's limit on an engine host with host_total bytes of memory; None: no limit."""
        return int(host_total * AUTO_SHARE) if self.auto else self.size

    def describe(self, host_total: int | None) -> str:
        """The rule, as a result records it."""
        if self.auto:
            return f"auto: {AUTO_SHARE:.0%} of the engine host's {gib(host_total or 0)}"
        return "none" if self.size is None else self.text


def memory_option(value: str | int | None) -> MemoryOption:
    """--memory-limit's value (auto, none, SIZE such as 16g; an int is bytes); UserError if not understood."""
    if value is None or value == "none":
        return MemoryOption("none", None)
    if value == "auto":
        return MemoryOption("auto", None)
    size = size_bytes(value)
    if size is None:
        raise UserError(f"--memory-limit {value} is not understood; use auto, none, or a size with its unit "
                        f"such as 16g or 512m.")
    if size < DOCKER_MINIMUM:
        raise UserError(f"--memory-limit {value} is below the 6 MiB the Docker engine allows; give a larger size "
                        f"such as 2g, or auto.")
    return MemoryOption(str(value), size)


def size_bytes(value: str | int) -> int | None:
    """A size as Docker takes it (16g, 512m, 1.5g; an int is bytes) in bytes; None where it is not one."""
    if isinstance(value, int):
        return value
    m = _SIZE.fullmatch(value.strip())
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()]) if m else None


def gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"

"""Memory readings of a JAX device: XLA's allocator statistics on a GPU, the process's resident memory on a CPU."""
from __future__ import annotations

from typing import Any

from reprokit.kits.framework_free.measure import rss_bytes


def stats(device: Any) -> dict[str, int]:
    """XLA's allocator statistics of one device ({} where the device keeps none, as a CPU)."""
    got = device.memory_stats() if hasattr(device, "memory_stats") else None
    return dict(got or {})


def in_use(device: Any) -> int:
    """Bytes in use now: the allocator's on a GPU, else the process's resident memory."""
    found = stats(device).get("bytes_in_use")
    return int(found) if found is not None else rss_bytes()


class DevicePeak:
    """XLA's allocator peak over a phase on a GPU.

    XLA has no call that resets ``peak_bytes_in_use``: it is the highest since the process started.
    A phase that raises it has that new peak as its own, exactly; a phase that stays below an earlier
    phase's peak has no reading of its own (not measured, never that earlier figure).
    """

    SOURCE = "device.memory_stats()['peak_bytes_in_use'] (XLA's allocator, preallocation off)"

    def __init__(self, device: Any) -> None:
        self.device = device
        self._before = 0

    def reset(self, _phase: str) -> None:
        self._before = int(stats(self.device).get("peak_bytes_in_use", 0))

    def read(self) -> dict[str, Any]:
        peak = int(stats(self.device).get("peak_bytes_in_use", 0))
        if peak > self._before:
            return {"allocated": {"peak_bytes": peak, "source": f"{self.SOURCE}: raised in this phase, so this "
                                                                 f"phase's peak"}}
        return {"allocated": {"peak_bytes": None, "source": f"{self.SOURCE} cannot be reset and this phase stayed "
                                                            f"below an earlier phase's peak of {peak} bytes: not "
                                                            f"measured"}}

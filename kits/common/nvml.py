"""Device-level GPU memory through NVML (ctypes, no extra package), sampled in a thread.

Framework counters see only their own allocator; NVML sees the device, CUDA
context and cuDNN workspaces included. The figure reported is the peak of
"memory used" minus what was used before this process touched the GPU.
"""
from __future__ import annotations

import ctypes
import threading


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class DeviceMemorySampler:
    """Start before the framework creates its CUDA context; stop after training."""

    SOURCE = "NVML device memory used, peak minus the idle baseline (CUDA context included)"

    def __init__(self, index: int = 0, interval_s: float = 0.02) -> None:
        self.unavailable: str | None = None
        self.baseline = self.peak = 0
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            self._lib = ctypes.CDLL("libnvidia-ml.so.1")
            if self._lib.nvmlInit_v2() != 0:
                raise OSError("nvmlInit_v2 failed")
            self._handle = ctypes.c_void_p()
            if self._lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self._handle)) != 0:
                raise OSError(f"no NVML device {index}")
            self.baseline = self.peak = self._used()
        except (OSError, AttributeError) as exc:
            self.unavailable = f"NVML unavailable ({exc})"

    def _used(self) -> int:
        memory = _Memory()
        if self._lib.nvmlDeviceGetMemoryInfo(self._handle, ctypes.byref(memory)) != 0:
            raise OSError("nvmlDeviceGetMemoryInfo failed")
        return int(memory.used)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.peak = max(self.peak, self._used())

    def start(self) -> None:
        if self.unavailable is None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    def stop(self) -> dict:
        if self.unavailable is not None:
            return {"device_peak_bytes": None, "device_source": self.unavailable}
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._used())
        self._lib.nvmlShutdown()
        return {"device_peak_bytes": self.peak - self.baseline, "device_baseline_bytes": self.baseline,
                "device_source": self.SOURCE}

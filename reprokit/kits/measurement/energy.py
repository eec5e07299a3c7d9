"""The energy a run's timed window took: NVML's total-energy counter on a GPU, RAPL on a CPU where the host shows it.

A Tracker (reprokit/kits/framework_free/measure.py), started and stopped at the timed window's edges as the co-load
reading is. On a GPU it reads the watched device's counter (nvmlDeviceGetTotalEnergyConsumption, millijoules since
the driver loaded; Volta and newer) through the run's own NVML sampler; the counter is the whole GPU's, so
another process on it would count too (the run's GPU-state findings say whether one was there). On a CPU it
reads the package domains of Linux's powercap RAPL interface (/sys/class/powercap/intel-rapl:N/energy_uj,
also used for AMD packages), which count every process on those packages; each wraps at its
max_energy_range_uj. Most hosts show RAPL to root only, and virtual machines and containers rarely at all:
then the reading is "not measured" with that reason, never a guess.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

POWERCAP = Path("/sys/class/powercap")


class _Counter(Protocol):
    method: str
    scope: str

    def joules(self) -> float: ...


class _Gpu:
    method = "NVML total-energy counter of the run's GPU (nvmlDeviceGetTotalEnergyConsumption), over the timed window"
    scope = "the whole GPU: another process on it would count too"

    def __init__(self, sampler: Any) -> None:
        self._sampler = sampler

    def joules(self) -> float:
        return float(self._sampler.energy_mj()) / 1e3


class _Rapl:
    method = "RAPL package energy counters (/sys/class/powercap/intel-rapl:N/energy_uj), over the timed window"
    scope = "the CPU packages: every process on them counts"

    def __init__(self, root: Path = POWERCAP) -> None:
        self.domains = sorted(d for d in root.glob("intel-rapl:*") if d.name.count(":") == 1)   # packages, not parts
        if not self.domains:
            raise OSError(f"this host shows no RAPL energy counter ({root} has no intel-rapl domain; virtual machines "
                          f"and containers usually hide it)")
        self._ranges = [int((d / "max_energy_range_uj").read_text()) for d in self.domains]
        self._last = self._read()
        self._total_uj = 0

    def _read(self) -> list[int]:
        try:
            return [int((d / "energy_uj").read_text()) for d in self.domains]
        except PermissionError as exc:
            raise OSError(f"the RAPL counter is readable by root only here ({exc.strerror}: {exc.filename})") from None

    def joules(self) -> float:
        """Microjoules counted since this reader started, each domain's wrap-around undone."""
        now = self._read()
        for i, (before, after) in enumerate(zip(self._last, now)):
            self._total_uj += after - before if after >= before else after + self._ranges[i] - before
        self._last = now
        return self._total_uj / 1e6


class Energy:
    """As a Tracker (its report takes the samples trained): joules over the timed window, or why there is none.
    ``sampler``: the run's NVML device sampler on a GPU (watching its device by the first start), None on a CPU."""

    def __init__(self, sampler: Any = None) -> None:
        self.unavailable: str | None = None
        self._counter: _Counter | None = None
        self._sampler = sampler
        self.window_s = self.joules = 0.0
        self._start: tuple[float, float] | None = None
        if sampler is None:
            try:
                self._counter = _Rapl()
            except OSError as exc:
                self.unavailable = str(exc)
        self.method = (_Gpu.method if sampler is not None else _Rapl.method)

    def start(self) -> None:
        if self.unavailable:
            return
        try:
            if self._counter is None:
                self._counter = _Gpu(self._sampler)
            self._start = (time.monotonic(), self._counter.joules())
        except OSError as exc:
            self.unavailable = str(exc)

    def stop(self) -> None:
        if self._start is None or self._counter is None or self.unavailable:
            return
        t0, j0 = self._start
        try:
            j1 = self._counter.joules()
        except OSError as exc:
            self.unavailable = str(exc)
            return
        self.window_s += time.monotonic() - t0
        self.joules += j1 - j0
        self._start = None

    def report(self, samples: int) -> dict[str, Any]:
        """The window's joules, per training sample and as mean watts; or None with why not."""
        out: dict[str, Any] = {"method": self.method}
        if self.unavailable or self.window_s <= 0 or samples <= 0 or self._counter is None:
            out.update(joules=None, why_not=self.unavailable or "the run had no timed training step")
            return out
        out.update(joules=round(self.joules, 3), window_s=round(self.window_s, 3), samples=samples,
                   joules_per_sample=self.joules / samples, mean_watts=round(self.joules / self.window_s, 2),
                   scope=self._counter.scope)
        return out

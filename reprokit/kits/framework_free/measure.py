"""Clocks and memory readings shared by both kits (standard library and numpy only)."""
from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

_PAGE = os.sysconf("SC_PAGE_SIZE")
_statm: tuple[int, int] | None = None      # (the pid that opened it, a descriptor of its /proc/self/statm)


def now() -> float:
    return time.perf_counter()


def rss_bytes() -> int:
    """Current resident memory of this process: one read of /proc/self/statm through a descriptor kept open (an
    open per reading took 10 us, and 100 us beside a busy Keras step; a read takes 1 us). A forked child opens
    its own: the inherited descriptor reads the parent's."""
    global _statm
    if _statm is None or _statm[0] != os.getpid():
        _statm = (os.getpid(), os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC))
    return int(os.pread(_statm[1], 128, 0).split()[1]) * _PAGE


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024          # reported in kB
    raise OSError(f"/proc/self/status has no {field}")


class ResidentPeak:
    """The process's resident high-water mark per phase, on Linux: exact, and no thread competes with training.

    Writing 5 to /proc/self/clear_refs resets VmHWM to the current resident size; VmHWM in
    /proc/self/status then reads the highest since. Where the kernel refuses the reset, the
    reading is unavailable with its reason, never a peak since the process started.

    Training frees its activations into the C library's allocator, which keeps them resident, so an
    evaluation that follows would allocate into them and its own needs would never show. Before an
    evaluation phase (only: no timed training step follows it) the allocator hands that free memory
    back to the system (glibc's malloc_trim). The next epoch's first training step then takes that
    memory from the system again: about a fifth of one step's time on the quick profile's CPU.
    """

    SOURCE = ("process resident high-water mark of the phase (VmHWM, reset at the phase's start by writing 5 to "
              "/proc/self/clear_refs; before an evaluation, malloc_trim first returns the allocator's free memory)")

    def __init__(self) -> None:
        self.unavailable: str | None = None
        self.baseline = rss_bytes()      # before the model is built: the framework's libraries and the data
        self._trim: Callable[[int], object] | None
        try:
            self._trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):   # not glibc: an evaluation's mark then also holds training's leftovers
            self._trim = None

    def reset(self, phase: str) -> None:
        if phase == "eval" and self._trim is not None:
            self._trim(0)
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError as exc:
            self.unavailable = f"the resident high-water mark cannot be reset here ({exc})"

    def read(self) -> dict[str, Any]:
        if self.unavailable:
            return {"process": {"peak_bytes": None, "source": self.unavailable}}
        return {"process": {"peak_bytes": _status_bytes("VmHWM"), "source": self.SOURCE,
                            "baseline_bytes": self.baseline}}


def step_stats(values: list[float]) -> dict[str, Any]:
    """Median, 95th percentile and mean of per-step seconds, with the raw values kept."""
    if not values:
        return {"p50": None, "p95": None, "mean": None, "n": 0, "values": []}
    arr = np.asarray(values, dtype=np.float64)
    return {
        "p50": float(np.percentile(arr, 50)),
        "p95": float(np.percentile(arr, 95)),
        "mean": float(arr.mean()),
        "n": int(arr.size),
        "values": [round(v, 7) for v in values],
    }


class Tracker(Protocol):
    """One measurement over stretches of a run, driven as optimum-benchmark drives its latency, memory and
    energy trackers: ``start`` opens a stretch, ``stop`` closes it, ``report`` is what every stretch measured.
    ``method`` says how, in words, for the result."""

    method: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def report(self) -> object: ...


class WindowTimer:
    """Step times from windows of k steps, the device synchronised only at window edges (a Tracker).

    Reading a clock after an asynchronous launch measures the queue, not the
    device; synchronising every step would slow what is measured. Windows of
    k steps do neither: the per-step figure is the window's time divided by k.
    """

    def __init__(self, k: int, sync: Callable[[], object]) -> None:
        self.method = f"windows of {k} step(s), the device synchronised at window edges"
        self.k = k
        self._sync = sync
        self._start: float | None = None
        self._count = 0
        self._per_step: list[float] = []

    def start(self) -> None:
        self._sync()
        self._start = now()
        self._count = 0

    def tick(self) -> None:
        """Call after each step; closes a window every k steps."""
        self._count += 1
        if self._count == self.k:
            self._sync()
            t = now()
            assert self._start is not None         # start() opened the window
            self._per_step.append((t - self._start) / self.k)
            self._start = t
            self._count = 0

    def stop(self) -> None:
        """The steps since the last full window are not timed: a window shorter than k is not one."""
        self._start = None
        self._count = 0

    def report(self) -> list[float]:
        """Seconds per step, one figure per full window."""
        return self._per_step



class NoStepTimer:
    """Step instrumentation off: throughput only, to show the instrumentation changes nothing."""

    method = "not taken (step instrumentation off)"

    def start(self) -> None:
        pass

    def tick(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def report(self) -> list[float]:
        return []


def process_age_s() -> float:
    """Seconds since this process started (exec included), from its start time in /proc/self/stat.

    The kernel counts that start in clock ticks since boot (CLOCK_BOOTTIME, 10 ms at the usual 100 Hz).
    """
    with open("/proc/self/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()      # the command name may hold spaces
    start = int(fields[19]) / os.sysconf("SC_CLK_TCK")     # field 22 of the line, 20th after the name
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - start)

"""What ran beside a run on its CPUs, over its timed window: the cores other processes kept busy.

The busy time of the CPUs the run may use comes from /proc/stat (the host's, also inside a
container: the file is not namespaced), this process's own from getrusage (every thread of it)
and its children's from /proc (a data loader's workers are the run's, not another's). Their
difference over the window's seconds is how many of its cores other processes used while the run
was timed; a ``--parallel`` neighbour pinned to other CPUs is not among them. /proc/stat counts in
clock ticks (10 ms at the usual 100 Hz) on each CPU, so the reading is good to about
CPUs / (100 x window seconds) cores, which the result keeps (``resolution_cores``). The load average
and the CPUs the run may use are kept beside it.
"""
from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK")
METHOD = ("cores other processes kept busy over the timed window: the busy time of the CPUs the run may use "
          "(/proc/stat) less this process's (getrusage, every thread) and its children's (/proc), divided by the "
          "window's seconds")


def busy_s(cpus: set[int]) -> float:
    """Seconds these CPUs of the host spent busy since boot (user, nice, system, irq, softirq, steal)."""
    total = 0
    with open("/proc/stat") as fh:
        for line in fh:
            name, *fields = line.split()
            if not name.startswith("cpu"):
                break                                   # the per-CPU lines come first
            if name == "cpu" or int(name[3:]) not in cpus:
                continue
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
            total += user + nice + system + irq + softirq + steal    # guest time is inside user already
    return total / _TICK


def _children_s(pid: int) -> float:
    """CPU seconds of this process's living descendants."""
    total = 0.0
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                kids = [int(k) for k in task.read_text().split()]
            except OSError:
                continue
            for kid in kids:
                try:
                    stat = Path(f"/proc/{kid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                total += (int(stat[11]) + int(stat[12])) / _TICK    # utime, stime
                todo.append(kid)
    return total


def own_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime + _children_s(os.getpid())


class CoLoad:
    """A Tracker (reprokit/kits/framework_free/measure.py): start() and stop() at the timed window's edges, once or per
    epoch."""

    method = METHOD

    def __init__(self) -> None:
        self.window_s = 0.0
        self.other_s = 0.0
        self._start: tuple[float, float, float] | None = None
        self.unavailable: str | None = None
        self.cpus = os.sched_getaffinity(0)

    def _now(self) -> tuple[float, float, float]:
        return time.monotonic(), busy_s(self.cpus), own_s()

    def start(self) -> None:
        try:
            self._start = self._now()
        except (OSError, ValueError) as exc:          # no /proc/stat here
            self.unavailable = f"not measured: /proc/stat cannot be read here ({exc})"

    def stop(self) -> None:
        if self._start is None:
            return
        t0, busy0, own0 = self._start
        t1, busy1, own1 = self._now()
        self.window_s += t1 - t0
        self.other_s += (busy1 - busy0) - (own1 - own0)
        self._start = None

    def report(self) -> dict[str, Any]:
        cpus = len(self.cpus)
        out: dict[str, Any] = {"method": self.method, "window_s": round(self.window_s, 3), "cpus_allowed": cpus,
                               "host_cpus": os.cpu_count(), "load_average": [round(v, 2) for v in os.getloadavg()]}
        if self.unavailable or self.window_s <= 0:
            out["other_cores"] = None
            out["why_not"] = self.unavailable or "not measured: the run had no timed window"
        else:
            # below zero only by the clock ticks' rounding: nothing else ran
            out["other_cores"] = round(max(0.0, self.other_s / self.window_s), 3)
            # each CPU's count may be off by a tick at either edge: a short window reads coarsely
            out["resolution_cores"] = round(cpus / (_TICK * self.window_s), 3)
        return out

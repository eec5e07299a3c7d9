"""Memory peaks by phase, where they happen: every counter reset at a phase's start and read at its end.

A run's phases are its warmup, then each epoch's training and evaluation. Each counter (the
framework's allocator, the device through NVML, the process's resident high-water mark) is a
small object with ``reset(phase)`` (the phase that starts) and ``read() -> {reading:
{"peak_bytes", "source", ...}}``. The
first reading of the first counter is the phase's own ``peak_bytes``, the one the result reports.
Warmup has phases of its own, so autotuning and one-off workspaces stay out of the training peak.
"""
from __future__ import annotations

from typing import Any

WARMUP, TRAIN, EVAL = "warmup", "train", "eval"


class PhaseMemory:
    def __init__(self, counters: list[Any]) -> None:
        self.counters = counters
        self.records: list[dict[str, Any]] = []

    def start(self, phase: str) -> None:
        """Reset every counter: what follows is a new phase."""
        for counter in self.counters:
            counter.reset(phase)

    def end(self, phase: str, epoch: int, steps: int, then: str) -> None:
        """Read every counter for the phase that ends here, then start the next one (``then``)."""
        readings: dict[str, dict[str, Any]] = {}
        for counter in self.counters:
            readings.update(counter.read())
        first = next(iter(readings.values()), {"peak_bytes": None, "source": "no memory counter"})
        self.records.append({"epoch": epoch, "phase": phase, "steps": steps, "peak_bytes": first["peak_bytes"],
                             "source": first["source"], "readings": readings})
        self.start(then)

    def peaks(self) -> dict[str, dict[str, Any]]:
        """Each reading's highest peak over the training and evaluation phases (warmup left out)."""
        out: dict[str, dict[str, Any]] = {}
        for record in self.records:
            if record["phase"] == WARMUP:
                continue
            for name, got in record["readings"].items():
                if got["peak_bytes"] is not None and got["peak_bytes"] >= (out.get(name) or {}).get("peak_bytes", -1):
                    out[name] = {**got, "epoch": record["epoch"], "phase": record["phase"]}
        return out

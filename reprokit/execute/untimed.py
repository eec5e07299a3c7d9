"""Kit processes that are no timed run of the matrix (a certificate's sides) through the same gate as the runs,
on this host: each holds the device locks that a timed run of its device holds (reprokit/execute/locks.py), so no
command times a run on those devices meanwhile, and stands in the ledger, so a run timed on other devices of
the host records it beside itself (``launcher.co_load``). The head host of a Ray cluster makes the certificates
too: they never go to a node.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.execute import locks, schedule
from reprokit.runners.base import KitCall, Outcome, ProgressFn, Runner

UNTIMED = "untimed"          # the ledger's experiment of such a process: it names no experiment's run


@dataclass
class Gated:
    """A runner whose every call waits for the devices and stands in the ledger; all else is the runner's."""
    runner: Runner
    device: str                              # cpu or gpu: what a run of the matrix times on
    ledger: Path
    gpus: tuple[str, ...] | None = None      # the assigned GPUs (None: every GPU of the host)
    name: str = field(init=False)
    data_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.name, self.data_dir = self.runner.name, self.runner.data_dir

    def missing(self, frameworks: set[str]) -> list[str]:
        return self.runner.missing(frameworks)

    def prepare(self, frameworks: set[str]) -> None:
        self.runner.prepare(frameworks)

    def describe(self, framework: str) -> dict[str, Any]:
        return self.runner.describe(framework)

    def run(self, call: KitCall, on_progress: ProgressFn) -> Outcome:
        with locks.devices(schedule.timed_on(self.device, self.gpus)):
            ledger = schedule.Ledger(self.ledger)
            entry = f"{call.label or call.module}-{os.getpid()}-{time.time_ns()}"
            ledger.begin_entry(entry, UNTIMED, call.framework, call.label, 0, None)
            try:
                return self.runner.run(call, on_progress)
            finally:
                ledger.end(entry)

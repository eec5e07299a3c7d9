"""Progress lines for the host: a marker, then one JSON object, at most about once a second."""
from __future__ import annotations

import json
import sys
import time
from typing import Any

from reprokit.kits.contract.names import PROGRESS_MARKER


class Progress:
    def __init__(self, min_interval_s: float = 1.0, silent: bool = False) -> None:
        self._min = min_interval_s
        self._silent = silent           # a run's rank other than 0: the run's lines are rank 0's
        self._last = 0.0
        self._t0 = time.perf_counter()

    def due(self) -> bool:
        """Whether a line would go out now (a step's caller asks first: building its event costs more)."""
        return time.perf_counter() - self._last >= self._min

    def emit(self, force: bool = False, **event: Any) -> None:
        t = time.perf_counter()
        if self._silent or (not force and t - self._last < self._min):
            return
        self._last = t
        event["elapsed_s"] = round(t - self._t0, 1)
        sys.stdout.write(PROGRESS_MARKER + json.dumps(event) + "\n")
        sys.stdout.flush()

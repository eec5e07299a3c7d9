"""Step times of a JAX run, from windows whose edges are where a step completes, the next one already queued.

JAX dispatches a step and returns at once. The shared ``WindowTimer`` (reprokit/kits/framework_free/measure.py) waits at
each window's edge for every step dispatched so far, so with windows of one step the device stood idle after
every step while the host read the clock, sliced the next batch, sent it and dispatched the next step: about
3 ms a step here, which the bench's bare loop never pays, since its next step is always queued behind the
running one. This timer reads each edge one step later: after step j+1 is dispatched, it waits for step j's
own output (the on-device sums it returned, which step j+1 reads and does not take over) and reads the clock
when step j is done. The device then always has the next step; a window is the time its k steps took on the
device, and the first window of a stretch also holds its first step's dispatch, as the shared timer's does.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from reprokit.kits.framework_free.measure import WindowTimer, now


class CompletionTimer(WindowTimer):
    """WindowTimer's figures (seconds per step, one per full window), each edge read one step later.

    ``sync`` waits for everything dispatched (a stretch's start); ``latest`` gives the output of the step just
    dispatched that the next step leaves alone, waited for once that next step is queued."""

    def __init__(self, k: int, sync: Callable[[], object], latest: Callable[[], Any]) -> None:
        super().__init__(k, sync)
        self.method = (f"windows of {k} step(s), each edge where a step completes, read with the next step "
                       f"already queued (jax.block_until_ready on that step's own output)")
        self._latest = latest
        self._pending: Any = None          # the output of the last step dispatched, not yet waited for

    def start(self) -> None:
        super().start()
        self._pending = None

    def tick(self) -> None:
        """Call after each step is dispatched: closes the step before it, once the device has finished it."""
        previous, self._pending = self._pending, self._latest()
        if previous is not None:
            jax.block_until_ready(previous)
            self._closed(now())

    def stop(self) -> None:
        """The last step dispatched closes here, once done; the steps since the last full window are not timed
        (a window shorter than k is not one)."""
        if self._pending is not None and self._start is not None:
            jax.block_until_ready(self._pending)
            self._closed(now())
        self._pending = None
        super().stop()

    def _closed(self, t: float) -> None:
        self._count += 1
        if self._count == self.k:
            assert self._start is not None        # start() opened the window
            self._per_step.append((t - self._start) / self.k)
            self._start = t
            self._count = 0

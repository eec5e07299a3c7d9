"""Each measured step's span from the end of its forward pass to its optimizer step: the loss, the backward pass and,
under DDP, its all-reduce. A rank that waits in the all-reduce for a slower one has the longer span
(reprokit/kits/observation/rank_detectors.py); the same span at one device is the step without collectives, so the
difference is the share of a step spent in collectives and waiting (reprokit/report/scaling_section.py). Two clock
reads per step, no read of the device: on a GPU the span is the host's, as the step's launches and waits make it.
"""
from __future__ import annotations

from reprokit.kits.framework_free.measure import now

SPANS = 64                       # measured steps whose span is kept


class BackwardSpans:
    def __init__(self) -> None:
        self._forward_end: float | None = None
        self.spans: list[float] = []

    def forward_ended(self) -> None:
        self._forward_end = now()

    def step_begins(self, measured: bool) -> None:
        """At the optimizer step: the span since the forward pass ended, once steps are measured."""
        if measured and self._forward_end is not None and len(self.spans) < SPANS:
            self.spans.append(now() - self._forward_end)
        self._forward_end = None

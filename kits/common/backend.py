"""The small interface each framework implements; everything else is shared.

The training loop, the batch order, the clocks and the result file are
framework-free (kits/common), so both frameworks are driven by the same code
and can only differ where a backend is told to differ (the spec's pitfalls).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from kits.common.data import Arrays


class Backend(Protocol):
    name: str                 # "pytorch" | "tensorflow"
    averaged_over: str        # "samples", or "batches" where the run reproduces code that divides by batches

    def environment(self) -> dict:
        """Framework, version, build, device and the settings it actually applied."""

    def build(self, arrays: Arrays) -> dict:
        """Create model, optimizer, loss and input pipeline; return {"parameters": {...}}."""

    def training_flops(self) -> dict:
        """Training FLOPs per sample of the model built (kits/common/arithmetic.py): forward, backward,
        training and how they were counted; then the framework's memory peak counters are reset."""

    def train_batches(self, epoch: int) -> Iterator[Any]:
        """This epoch's training batches, on their way to the device."""

    def test_batches(self) -> Iterator[Any]:
        """The held-out batches."""

    def batch_size_of(self, batch: Any) -> int:
        """The number of samples in the tensors the model receives (read from their shape)."""

    def train_step(self, batch: Any) -> None:
        """One optimizer step; adds the batch's summed loss and correct count to on-device sums."""

    def eval_step(self, batch: Any) -> None:
        """Forward only; adds to the on-device sums."""

    def set_mode(self, training: bool) -> None:
        """Switch layers such as Dropout and BatchNorm between training and evaluation."""

    def end_epoch(self, train_loss_sum: float) -> None:
        """Per-epoch work such as a learning-rate scheduler (none in a fixed run)."""

    def take_sums(self) -> tuple[float, float]:
        """Read and reset the summed loss and correct count (this synchronises)."""

    def step_timer(self, k: int):
        """start() / tick() after each step / per_step() and a ``method`` sentence (see measure.WindowTimer)."""

    def sync(self) -> None:
        """Wait until every queued device operation has finished."""

    def memory_now(self) -> int:
        """Bytes in use now, from the source memory_report names (cheap; no sync)."""

    def memory_report(self) -> dict:
        """Peak figures, each with its source named."""

    def matmul_flops_per_s(self) -> float:
        """The device's measured fp32 matmul rate with the run's thread settings."""

    def observed(self) -> dict:
        """Evidence for the detectors: modes seen during steps and a probe of the loss's inputs."""

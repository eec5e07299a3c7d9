"""The small interface each framework implements; everything else is shared.

The training loop, the batch order, the clocks and the result file are
framework-free (kits/common), so both frameworks are driven by the same code
and can only differ where a backend is told to differ.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class Backend(Protocol):
    name: str            # "pytorch" | "tensorflow"

    def environment(self) -> dict:
        """Framework, version, build, device and the settings it actually applied."""

    def build(self) -> dict:
        """Create model, optimizer and loss from the spec; return {"parameters": {...}}."""

    def to_device(self, x: np.ndarray, y: np.ndarray) -> Any:
        """Hand one uint8 NHWC batch and its int64 labels to the device (may be asynchronous)."""

    def batch_size_of(self, batch: Any) -> int:
        """The number of samples in the tensors the model receives (read from their shape)."""

    def train_step(self, batch: Any) -> None:
        """One optimizer step; adds the batch's summed loss and correct count to on-device sums."""

    def eval_step(self, batch: Any) -> None:
        """Forward only, in evaluation mode, without gradients; adds to the on-device sums."""

    def set_mode(self, training: bool) -> None:
        """Switch layers such as Dropout and BatchNorm between training and evaluation."""

    def take_sums(self) -> tuple[float, float]:
        """Read and reset the summed loss and correct count (this synchronises)."""

    def sync(self) -> None:
        """Wait until every queued device operation has finished."""

    def memory_now(self) -> int:
        """Bytes in use now, from the source memory_report names (cheap; no sync)."""

    def memory_report(self) -> dict:
        """Peak figures, each with its source named."""

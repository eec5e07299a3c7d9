"""The small interface each framework implements; everything else is shared.

The training loop, the batch order, the clocks and the result file are
framework-free (reprokit/kits/training_loop), so both frameworks are driven by the same code
and can only differ where a backend is told to differ (the spec's pitfalls).
Where the spec names the user's hooks (reprokit/kits/framework_free/custom.py), the backend runs
them in place of its own input pipeline, evaluation forward pass and metrics.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from reprokit.kits.framework_free.data import Arrays

if TYPE_CHECKING:
    from reprokit.kits.framework_free.measure import WindowTimer


class Backend(Protocol):
    name: str                 # its registry name (reprokit/kits/contract/names.py)
    input_reader: str         # how the run reads its batches, in words (its input hook, a posted reader, the kit's)
    metrics_source: str       # where the reported figures come from (the user's metrics hook, the posted code, the kit)
    memory_series: str        # what memory_now reads

    def environment(self) -> dict[str, Any]:
        """Framework, version, build, device and the settings it actually applied."""

    def build(self, arrays: Arrays) -> dict[str, Any]:
        """Create model, optimizer, loss and input pipeline; return {"parameters": {...}}."""

    def training_flops(self) -> dict[str, Any]:
        """Training FLOPs per sample of the model built (reprokit/kits/framework_free/arithmetic.py): forward, backward,
        training and how they were counted; then the framework's memory peak counters are reset."""

    def train_batches(self, epoch: int) -> Iterator[Any]:
        """This epoch's training batches, on their way to the device."""

    def test_batches(self) -> Iterator[Any]:
        """The held-out batches."""

    def warm_test_batches(self) -> Iterator[Any]:
        """One held-out batch of each size test_batches gives, for the warmup."""

    def forget_outputs(self) -> None:
        """Drop what the loop keeps alive from earlier steps (outputs, graphs), so a warmup step reaches no
        later phase's peak."""

    def batch_size_of(self, batch: Any) -> int:
        """The number of samples in the tensors the model receives (read from their shape)."""

    def train_step(self, batch: Any) -> None:
        """One optimizer step; the kit counts the batch's loss and correct predictions from the outputs it
        observed into on-device sums, and the metrics hook (if any) gets the same outputs."""

    def eval_step(self, batch: Any) -> None:
        """The evaluation forward pass (the user's evaluate hook where named); counted the same way."""

    def set_mode(self, training: bool) -> None:
        """A phase starts: switch layers such as Dropout and BatchNorm, and start the phase's metrics."""

    def reported(self) -> dict[str, Any] | None:
        """The phase's reported {"loss", "accuracy"} from its metrics hook (the user's or the posted code's);
        None where the kit's own count is the run's figure."""

    def end_epoch(self, train_loss_sum: float) -> None:
        """Per-epoch work such as a learning-rate scheduler (none in a fixed run)."""

    def take_sums(self) -> tuple[float, float]:
        """Read and reset the summed loss and correct count (this synchronises)."""

    def step_timer(self, k: int) -> WindowTimer:
        """start() / tick() after each step / stop() / report() and a ``method`` sentence (see measure.WindowTimer)."""

    def sync(self) -> None:
        """Wait until every queued device operation has finished."""

    def memory_now(self) -> int:
        """Bytes in use now, as memory_series names them (cheap; no sync)."""

    def memory_counters(self) -> list[Any]:
        """The framework's per-phase peak counters on a GPU (reprokit/kits/measurement/phases.py); [] on a CPU."""

    def matmul_flops_per_s(self) -> float:
        """The device's measured fp32 matmul rate with the run's thread settings."""

    def observed(self) -> dict[str, Any]:
        """Evidence for the detectors: modes seen during steps and a probe of the loss's inputs."""

    def no_gpu_reason(self) -> str:
        """Where a GPU was asked for and none is seen: the framework's own words for why."""

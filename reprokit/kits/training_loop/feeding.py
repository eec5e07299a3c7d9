"""Batches in the spec's order, from the host-prepared arrays, the same in every framework."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from reprokit.kits.contract.result_header import KIT_INPUT
from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.training_loop import distributed

# The backend's to_device: (inputs, labels), numpy arrays or the framework's tensors, to the batch the model takes.
ToDevice = Callable[[Any, Any], Any]
# The backend's to_device for several batches at once: their inputs and labels together, and each one's size.
ToDeviceMany = Callable[[Any, Any, list[int]], Iterable[Any]]
# The user's input hook, its options bound: (split, x, y, batch_size, epoch) to (inputs, labels) pairs.
InputHook = Callable[[str, np.ndarray, np.ndarray, int, int], Iterable[tuple[Any, Any]]]


class NumpyFeeder:
    """Slices uint8 batches with numpy and hands each to the backend's to_device.

    READER is how a result names this input (``effective.input``).

    ``shuffle=False`` and ``resume=True`` exist for the as-posted TensorFlow
    pipelines: a dataset that is never shuffled, and one iterator that runs on
    across epochs instead of starting again.

    ``many=(k, to_device_many)`` converts k training batches at a time, the same
    batches in the same order: for a backend whose every conversion between two
    steps costs more than the copy (TensorFlow's eager ops, reprokit/kits/tensorflow_kit/backend.py).
    """

    READER = KIT_INPUT

    def __init__(self, arrays: datalib.Arrays, spec: RunSpec, to_device: ToDevice,
                 shuffle: bool | None = None, resume: bool = False, eval_batch_size: int | None = None,
                 share: tuple[int, int] | None = None, many: tuple[int, ToDeviceMany] | None = None) -> None:
        self.arrays = arrays
        self.seed = spec.train.seed
        self.batch_size = spec.train.batch_size
        self.eval_batch_size = eval_batch_size or spec.train.eval_batch_size
        self.drop_last = spec.data.drop_last
        self.shuffle = spec.data.shuffle if shuffle is None else shuffle
        self.to_device = to_device
        self._stream: Iterator[np.ndarray] | None = None
        self.resume = resume
        self.share = share          # (rank, ranks): a DDP rank's share of each global batch (distributed.py)
        self.many = many
        self.steps = spec.train.max_steps_per_epoch or None      # what one epoch takes: no batch converted beyond

    def _indices(self, epoch: int) -> Iterator[np.ndarray]:
        order = datalib.epoch_order(len(self.arrays.x_train), self.seed, epoch, self.shuffle)
        batches = datalib.batches(order, self.batch_size, self.drop_last)
        return (distributed.shard(idx, *self.share) for idx in batches) if self.share else batches

    def train(self, epoch: int) -> Iterator[Any]:
        if self.resume:
            self._stream = self._stream or self._indices(1)
            indices = self._stream
        else:
            indices = self._indices(epoch)
        x, y = self.arrays.x_train, self.arrays.y_train
        if self.many and not self.resume:       # a resumed stream must not be read ahead of the epoch's steps
            return self._together(itertools.islice(indices, self.steps), *self.many)
        return (self.to_device(x[idx], y[idx]) for idx in indices)

    def _together(self, indices: Iterator[np.ndarray], k: int, to_device_many: ToDeviceMany) -> Iterator[Any]:
        x, y = self.arrays.x_train, self.arrays.y_train
        while group := list(itertools.islice(indices, k)):
            idx = np.concatenate(group)
            yield from to_device_many(x[idx], y[idx], [len(g) for g in group])

    def _test_indices(self) -> Iterator[np.ndarray]:
        return datalib.batches(np.arange(len(self.arrays.x_test)), self.eval_batch_size, False)

    def test(self) -> Iterator[Any]:
        x, y = self.arrays.x_test, self.arrays.y_test
        return (self.to_device(x[idx], y[idx]) for idx in self._test_indices())

    def warm_test(self) -> Iterator[Any]:
        x, y = self.arrays.x_test, self.arrays.y_test
        return (self.to_device(x[idx], y[idx]) for idx in datalib.one_of_each_size(self._test_indices()))


class HookFeeder:
    """The user's own input pipeline (their ``input`` hook) over the prepared arrays; each batch it yields
    goes to the backend's to_device, which takes numpy arrays and the framework's own tensors."""

    def __init__(self, fn: InputHook, arrays: datalib.Arrays, spec: RunSpec, to_device: ToDevice) -> None:
        self.fn, self.arrays, self.spec, self.to_device = fn, arrays, spec, to_device

    def train(self, epoch: int) -> Iterator[Any]:
        a = self.arrays
        return (self.to_device(x, y) for x, y in self.fn("train", a.x_train, a.y_train, self.spec.train.batch_size,
                                                         epoch))

    def test(self) -> Iterator[Any]:
        a = self.arrays
        return (self.to_device(x, y) for x, y in self.fn("test", a.x_test, a.y_test,
                                                         self.spec.train.eval_batch_size, 0))

    def warm_test(self) -> Iterator[Any]:
        """The user's pipeline gives batches of sizes the kit cannot know ahead: one whole pass, untimed."""
        first: dict[int, object] = {}
        for batch in self.test():
            first.setdefault(int(batch[0].shape[0]), batch)
        return iter(first.values())


class FeederMixin:
    """The batch plumbing both backends share: their ``feeder`` decides the batches."""

    feeder: NumpyFeeder

    def train_batches(self, epoch: int) -> Iterator[Any]:
        return self.feeder.train(epoch)

    def test_batches(self) -> Iterator[Any]:
        return self.feeder.test()

    def warm_test_batches(self) -> Iterator[Any]:
        """One evaluation batch of each size the evaluation pass gives (see training.warm_shapes)."""
        return self.feeder.warm_test()

    def forget_outputs(self) -> None:
        """Drop what the loop keeps alive from earlier steps (the backend's own, if any)."""

    def batch_size_of(self, batch: Any) -> int:
        """Samples in the tensors the model receives, read from their shape (no sync)."""
        return int(batch[0].shape[0])

"""What the bench's bare loops share (reprokit/kits/bench.py runs them; each framework's loop is its kit's
``bare.py``): the kit's batches over the bench's epochs, and the input's scale and size."""
from __future__ import annotations

import numpy as np

from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free import data as datalib


def epochs_of(full_batches: int, total: int) -> tuple[int, int]:
    """The fewest epochs of equal length, at most ``full_batches`` steps, holding ``total`` steps; and that length.
    A small dataset's one epoch would time too short a window (the quick ResNet-50's: 11 steps, a third of a
    second): the bench runs the kit over several, and the bare loops take the same batches."""
    epochs = -(-total // full_batches)
    return epochs, -(-total // epochs)


def schedule(spec: RunSpec, arrays: datalib.Arrays, warmup: int, steps: int) -> list[np.ndarray]:
    """The batches the kit takes in its first ``warmup + steps`` steps, epoch after epoch in its orders, each epoch
    cut as the bench cuts the kit's (bench.kit_spec): the same index arrays, all full."""
    batch = spec.train.batch_size
    epochs, length = epochs_of(len(arrays.x_train) // batch, warmup + steps)
    return [idx for epoch in range(1, epochs + 1)
            for idx in list(datalib.batches(datalib.epoch_order(len(arrays.x_train), spec.train.seed, epoch,
                                                                spec.data.shuffle), batch, True))[:length]]


def scale_resize(spec: RunSpec) -> tuple[float, int | None]:
    return spec.data.unit_scale, spec.data.resize_to

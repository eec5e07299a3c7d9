"""What the bench's bare loops share (reprokit/kits/bench.py runs them; each framework's loop is its kit's
``bare.py``): the kit's first-epoch batches, and the input's scale and size."""
from __future__ import annotations

import numpy as np

from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free import data as datalib


def schedule(spec: RunSpec, arrays: datalib.Arrays, warmup: int, steps: int) -> list[np.ndarray]:
    """The batches the kit's first epoch uses, in its order: the same index arrays."""
    order = datalib.epoch_order(len(arrays.x_train), spec.train.seed, 1, spec.data.shuffle)
    idx = list(datalib.batches(order, spec.train.batch_size, spec.data.drop_last))
    return idx[:warmup + steps]


def scale_resize(spec: RunSpec) -> tuple[float, int | None]:
    return spec.data.unit_scale, spec.data.resize_to

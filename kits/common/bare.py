"""What the bench's bare loops share (kits/bench.py runs them; each framework's loop is its kit's
``bare.py``): the kit's first-epoch batches, the typed model block, and the input's scale and size."""
from __future__ import annotations

from kits.common import data as datalib
from kits.common.spec import Model, parse


def schedule(spec: dict, arrays: datalib.Arrays, warmup: int, steps: int) -> list:
    """The batches the kit's first epoch uses, in its order: the same index arrays."""
    order = datalib.epoch_order(len(arrays.x_train), spec["train"]["seed"], 1, spec["data"]["shuffle"])
    idx = list(datalib.batches(order, spec["train"]["batch_size"], spec["data"]["drop_last"]))
    return idx[:warmup + steps]


def model(spec: dict):
    """The spec's model block, typed as the kits' builders take it."""
    return parse(Model, spec["model"], "model")


def scale_resize(spec: dict) -> tuple[float, int | None]:
    data = spec["data"]
    return (1.0 / 255.0 if data["scale"] == "unit" else 1.0,
            data["input_size"] if data["resize"] == "bilinear" else None)

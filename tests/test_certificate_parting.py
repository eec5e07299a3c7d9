"""Where two models part (reprokit/kits/framework_free/parting.py), on output lists that the control pairs do not reach: a layer
one framework lacks at the very end, a side with no layer at all, activations one side applies as functions.
The control pairs (tests/test_certificate_controls.py) name where real user pairs part."""
from __future__ import annotations

import numpy as np

from reprokit.kits.framework_free import parting

X = np.linspace(-1.0, 1.0, 24).reshape(2, 12)


def _layer(name: str, kind: str, family: str, values: np.ndarray, **settings) -> tuple[dict, np.ndarray]:
    return parting.entry(name, kind, family, settings, values.shape), values


def _message(a: list, b: list) -> str:
    found = parting.first_parting([e for e, _ in a], [v for _, v in a], [e for e, _ in b], [v for _, v in b], 1e-7)
    assert found is not None
    return parting.parting_message("pytorch", [e for e, _ in a], "tensorflow", [e for e, _ in b], found, "fp64")[0]


def test_a_layer_one_side_lacks_at_the_end_is_named():
    common = [_layer("0", "Linear", "dense", X, units=12), _layer("1", "ReLU", "activation", np.maximum(X, 0),
                                                                 activation="relu")]
    shifted = [*common, _layer("shift", "Shift", "shift", np.maximum(X, 0) + 1e-3)]
    assert _message(common, shifted) == ("first parts at TensorFlow shift (Shift), a layer PyTorch lacks; the outputs "
                                         "agree through PyTorch 1 (ReLU) / TensorFlow 1 (ReLU)")


def test_a_side_without_layers_is_named_not_crashed_on():
    one = [_layer("0", "Linear", "dense", X, units=12)]
    assert _message([], one) == "first parts at TensorFlow 0 (Linear), a layer PyTorch lacks; no layer's output agrees"
    assert parting.first_parting([], [], [], [], 1e-7) is None


def test_activations_as_functions_are_passed_over_and_the_product_that_parts_is_named():
    # PyTorch's F.relu has no module: only the products are recorded; Keras's fused activation is an entry
    pt = [_layer("conv", "Conv2d", "conv", X, bias=True), _layer("fc", "Linear", "dense", X[:, :4], bias=True)]
    tf = [_layer("conv2d", "Conv2D", "conv", X, bias=True),
          _layer("conv2d.activation", "relu", "activation", np.maximum(X, 0), activation="relu"),
          _layer("dense", "Dense", "dense", X[:, :4] * 1.01, bias=False)]
    assert _message(pt, tf) == ("first parts at PyTorch fc (Linear) / TensorFlow dense (Dense): output differs 9.9e-03 "
                                "of its scale (after TensorFlow conv2d.activation (relu), with no counterpart); "
                                "settings that differ: bias True vs False")

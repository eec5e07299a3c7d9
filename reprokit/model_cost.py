"""Training FLOPs of the built-in models, computed on the host from the spec alone.

Convolutions and matrix products only, 2 FLOPs per multiply-accumulate: the
forward pass, then the backward pass's weight gradients (the same products
again) and input gradients (again, except for the first layer, whose input is
the image). This is what a plan estimates from before anything ran, and what
the certificate's trajectory budget is checked against. A user's own model
has no figure here: only its frameworks can count it.
"""
from __future__ import annotations

from kits.common.names import SIMPLECNN_BLOCKS, VGG16_BLOCKS, scaled_width


def _layers(model: dict, input_size: int) -> list[float] | None:
    """Forward FLOPs per sample of each conv and dense layer, in order."""
    if model["name"] not in ("vgg16", "simplecnn"):
        return None
    blocks = VGG16_BLOCKS if model["name"] == "vgg16" else SIMPLECNN_BLOCKS
    out, channels, size = [], 3, input_size
    for i, block in enumerate(blocks):
        for width in block:
            width = scaled_width(width, model["width_multiplier"])
            out.append(2.0 * 9 * channels * width * size * size)     # 3x3, stride 1, same padding
            channels = width
        if model["name"] == "vgg16" or i < len(blocks) - 1:
            size //= 2                                                # 2x2 max pooling
    if model["name"] == "vgg16":
        hidden = model["classifier_width"]
        widths = [channels * size * size, hidden, hidden, model["num_classes"]]
    else:                                                             # global average pooling
        widths = [channels, model["num_classes"]]
    out += [2.0 * a * b for a, b in zip(widths, widths[1:])]
    return out


def training_flops_per_sample(model: dict, input_size: int) -> float | None:
    layers = _layers(model, input_size)
    if layers is None:
        return None
    return 3 * sum(layers) - layers[0]

"""The built-in models' shapes, computed on the host from the spec alone: training FLOPs and parameter counts.

FLOPs: convolutions and matrix products only, 2 FLOPs per multiply-accumulate:
the forward pass, then the backward pass's weight gradients (the same products
again) and input gradients (again, except for the first layer, whose input is
the image). This is what a plan estimates from before anything ran, and what
the certificate's trajectory budget is checked against.

Parameters: counted from the declared shapes, without building the models;
the report sets the quick model's size next to the full experiment's
(reprokit/report/parameter_counts.py), and tests hold both figures against
each framework's own count.

A user's own model has no figure here: only its frameworks can count it.
"""
from __future__ import annotations

from typing import Any

from reprokit.kits.contract.names import SIMPLECNN_BLOCKS, VGG16_BLOCKS, scaled_width
from reprokit.kits.framework_free import resnet


def _architecture(model: dict[str, Any], input_size: int) -> tuple[list[tuple[int, int, int]], list[int]]:
    """A built-in model's layers with weights: each 3x3 convolution (stride 1, same padding) as (input
    channels, output channels, side of its square input), in order, then the widths of its dense layers'
    chain, the features they take first. VGG16 pools 2x2 after every block and flattens; SimpleCNN after
    every block but the last, then averages globally."""
    vgg = model["name"] == "vgg16"
    blocks = VGG16_BLOCKS if vgg else SIMPLECNN_BLOCKS
    convs: list[tuple[int, int, int]] = []
    channels, size = 3, input_size
    for i, block in enumerate(blocks):
        for width in block:
            width = scaled_width(width, model["width_multiplier"])
            convs.append((channels, width, size))
            channels = width
        if vgg or i < len(blocks) - 1:
            size //= 2                                                # 2x2 max pooling
    if vgg:
        hidden = model["classifier_width"]
        dense = [channels * size * size, hidden, hidden, model["num_classes"]]
    else:                                                             # global average pooling
        dense = [channels, model["num_classes"]]
    return convs, dense


def _resnet(model: dict[str, Any], input_size: int) -> tuple[list[tuple[resnet.Conv, int]], list[int]]:
    """ResNet-50's convolutions with their output sides, in order, and its one dense layer's widths."""
    lay = resnet.layout(model["width_multiplier"], *resnet.options(model["options"]))
    return resnet.convs_at(lay, input_size), [lay.features, model["num_classes"]]


def _layers(model: dict[str, Any], input_size: int) -> list[float] | None:
    """Forward FLOPs per sample of each conv and dense layer, in order."""
    if model["name"] == "resnet50":
        convs_at, dense = _resnet(model, input_size)
        return ([2.0 * c.kernel ** 2 * c.cin * c.cout * side ** 2 for c, side in convs_at]
                + [2.0 * dense[0] * dense[1]])
    if model["name"] not in ("vgg16", "simplecnn"):
        return None
    convs, dense = _architecture(model, input_size)
    return ([2.0 * 9 * c_in * c_out * side * side for c_in, c_out, side in convs]
            + [2.0 * a * b for a, b in zip(dense, dense[1:])])


def training_flops_per_sample(model: dict[str, Any], input_size: int) -> float | None:
    layers = _layers(model, input_size)
    if layers is None:
        return None
    return 3 * sum(layers) - layers[0]


def parameter_counts(model: dict[str, Any], input_size: int) -> dict[str, int] | None:
    """{"total", "trainable"}; total includes BatchNorm's moving statistics, as Keras counts them.

    None for a user's own model: only its frameworks can count it.
    """
    if model["name"] == "custom":
        return None
    if model["name"] == "resnet50":                   # no conv biases; a BatchNorm after each convolution
        convs_at, (features, classes) = _resnet(model, input_size)
        weights = sum(c.kernel ** 2 * c.cin * c.cout for c, _ in convs_at)
        norms = sum(c.cout for c, _ in convs_at)
        trainable = weights + 2 * norms + features * classes + classes
        return {"total": trainable + 2 * norms, "trainable": trainable}
    convs, dense = _architecture(model, input_size)
    batchnorm = model["name"] != "vgg16"              # SimpleCNN: a BatchNorm after each convolution
    trainable = frozen = 0
    for c_in, c_out, _ in convs:
        trainable += 9 * c_in * c_out + c_out
        if batchnorm:
            trainable += 2 * c_out                    # BatchNorm gamma, beta
            frozen += 2 * c_out                       # BatchNorm moving mean, variance
    trainable += sum(a * b + b for a, b in zip(dense, dense[1:]))
    return {"total": trainable + frozen, "trainable": trainable}

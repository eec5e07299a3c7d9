"""Parameter counts of the spec's models from their declared shapes, without building them.

The report uses this to set the quick model's size next to the full
experiment's, and tests hold it against each framework's own count.
"""
from __future__ import annotations

from kits.common.names import SIMPLECNN_BLOCKS, VGG16_BLOCKS, scaled_width


def parameter_counts(model: dict, input_size: int) -> dict | None:
    """{"total", "trainable"}; total includes BatchNorm's moving statistics, as Keras counts them.

    None for a user's own model: only its frameworks can count it.
    """
    if model["name"] == "custom":
        return None
    trainable = frozen = 0
    channels = 3
    if model["name"] == "vgg16":
        for block in VGG16_BLOCKS:
            for width in block:
                out = scaled_width(width, model["width_multiplier"])
                trainable += 9 * channels * out + out
                channels = out
        features = channels * (input_size // 32) ** 2
        hidden = model["classifier_width"]
        trainable += features * hidden + hidden + hidden * hidden + hidden + hidden * model["num_classes"] + model["num_classes"]
    else:
        for block in SIMPLECNN_BLOCKS:
            for width in block:
                out = scaled_width(width, model["width_multiplier"])
                trainable += 9 * channels * out + out + 2 * out   # conv + BatchNorm gamma, beta
                frozen += 2 * out                                  # BatchNorm moving mean, variance
                channels = out
        trainable += channels * model["num_classes"] + model["num_classes"]
    return {"total": trainable + frozen, "trainable": trainable}

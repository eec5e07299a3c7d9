"""A Keras layer's settings, read from the built object (``layer.get_config()``), in the certificate's canonical
comparable form (reprokit/kits/framework_free/parting.py): the keys reprokit/kits/pytorch_kit/layer_settings.py gives
PyTorch's modules, padding as (top, bottom, left, right), BatchNorm's momentum as the weight of the new batch
(Keras's 1 - m).
"""
from __future__ import annotations

from typing import Any

import keras


def _pair(v: Any) -> list[int]:
    return [int(x) for x in v] if isinstance(v, (tuple, list)) else [int(v), int(v)]


def _padding(p: str, size: list[int], kernel: list[int], stride: list[int], dilation: list[int]) -> list[int]:
    """'valid' pads nothing; 'same' the extra row or column at the bottom and right."""
    if p != "same":
        return [0, 0, 0, 0]
    out = []
    for n, k, s, d in zip(size, kernel, stride, dilation):
        total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        out += [total // 2, total - total // 2]
    return out


def activation_name(fn: Any) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return "none" if name == "linear" else name


def fused_activation(layer: Any) -> Any:
    """The activation a Conv2D or Dense applies inside itself, or None."""
    fn = getattr(layer, "activation", None)
    if fn is None or not isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
        return None
    return None if activation_name(fn) == "none" else fn


def _activation(layer: Any, config: dict[str, Any]) -> dict[str, Any]:
    if isinstance(layer, keras.layers.ReLU):
        slope = float(config.get("negative_slope") or 0.0)
        out: dict[str, Any] = {"activation": "leaky_relu" if slope else "relu"}
        if slope:
            out["negative_slope"] = slope
        if config.get("max_value") is not None:
            out["max_value"] = float(config["max_value"])
        if config.get("threshold"):
            out["threshold"] = float(config["threshold"])
        return out
    if isinstance(layer, keras.layers.LeakyReLU):
        return {"activation": "leaky_relu", "negative_slope": float(config.get("negative_slope", config.get("alpha")))}
    if isinstance(layer, keras.layers.ELU):
        return {"activation": "elu", "alpha": float(config.get("alpha", 1.0))}
    if isinstance(layer, keras.layers.Softmax):
        axis = config.get("axis", -1)
        return {"activation": "softmax", "axis": "channels" if axis in (-1, [-1]) else axis}
    name = activation_name(layer.activation)
    return {"activation": name, **({"alpha": 1.0} if name == "elu" else {})}


def activation_settings(fn: Any) -> dict[str, Any]:
    """A fused activation's settings, as its own layer's."""
    name = activation_name(fn)
    return {"activation": name, **({"alpha": 1.0} if name == "elu" else {})}


def read(layer: Any, in_shape: list[int]) -> tuple[str, dict[str, Any]]:
    """(family, settings) of a layer called on an input of shape ``in_shape`` (NHWC). A fused activation is
    not among them: it is recorded as an entry of its own."""
    try:
        config = layer.get_config()
    except NotImplementedError:        # a layer of the user's own with arguments and no get_config
        config = {}
    size = in_shape[1:3] if len(in_shape) == 4 else [1, 1]
    L = keras.layers
    if isinstance(layer, L.Conv2D) and type(layer).__name__ == "Conv2D":
        kernel, stride, dilation = _pair(config["kernel_size"]), _pair(config["strides"]), _pair(
            config["dilation_rate"])
        return "conv", {"filters": int(config["filters"]), "kernel": kernel, "strides": stride,
                        "padding": _padding(config["padding"], size, kernel, stride, dilation), "dilation": dilation,
                        "groups": int(config.get("groups", 1)), "bias": bool(config["use_bias"]),
                        "padding_mode": "zeros"}
    if isinstance(layer, L.Dense):
        return "dense", {"units": int(config["units"]), "bias": bool(config["use_bias"])}
    if isinstance(layer, L.BatchNormalization):
        axes = config["axis"] if isinstance(config["axis"], (list, tuple)) else [config["axis"]]
        return "batchnorm", {"epsilon": float(config["epsilon"]), "momentum": 1.0 - float(config["momentum"]),
                             "axis": sorted(a % len(in_shape) for a in axes), "center": bool(config["center"]),
                             "scale": bool(config["scale"]), "running_statistics": True}
    if isinstance(layer, (L.ReLU, L.LeakyReLU, L.ELU, L.Softmax, L.Activation)):
        return "activation", _activation(layer, config)
    if isinstance(layer, (L.MaxPooling2D, L.AveragePooling2D)):
        kernel = _pair(config["pool_size"])
        stride = _pair(config["strides"]) if config.get("strides") else kernel
        padding = _padding(config["padding"], size, kernel, stride, [1, 1])
        if getattr(layer, "pad_each_side", None):        # a max pool with its own -inf padding (the kit's ResNet)
            padding = [layer.pad_each_side] * 4
        out: dict[str, Any] = {"pool": "max" if isinstance(layer, L.MaxPooling2D) else "avg", "pool_size": kernel,
                               "strides": stride, "padding": padding, "ceil_mode": False}
        out["dilation"] = [1, 1]
        if isinstance(layer, L.AveragePooling2D) and any(out["padding"]):
            out["count_include_pad"] = False
        return "pool", out
    if isinstance(layer, (L.GlobalAveragePooling2D, L.GlobalMaxPooling2D)):
        return "pool", {"pool": "avg" if isinstance(layer, L.GlobalAveragePooling2D) else "max",
                        "output_size": [1, 1]}
    if isinstance(layer, L.SpatialDropout2D):
        return "dropout", {"rate": float(config["rate"]), "kind": "channel"}
    if isinstance(layer, L.Dropout):
        return "dropout", {"rate": float(config["rate"]),
                           "kind": "element" if config.get("noise_shape") is None else "shaped"}
    if isinstance(layer, L.Flatten):
        return "flatten", {}
    if isinstance(layer, L.ZeroPadding2D):
        (top, bottom), (left, right) = config["padding"]
        return "pad", {"padding": [int(top), int(bottom), int(left), int(right)], "value": 0.0}
    if isinstance(layer, (L.Permute, L.Reshape)):
        return "reshape", {}
    if isinstance(layer, L.Identity):
        return "identity", {}
    return type(layer).__name__.lower(), _own(config)


_EVERY_LAYER = {"name", "trainable", "dtype", "autocast"}      # what a bare keras.layers.Layer's config holds


def _own(config: dict[str, Any]) -> dict[str, Any]:
    """A layer of the user's own: its config's plain values, less what every layer has."""
    plain = (bool, int, float, str)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()
            if k not in _EVERY_LAYER and (isinstance(v, plain) or (
                isinstance(v, (tuple, list)) and all(isinstance(x, plain) for x in v)))}

"""A PyTorch module's settings, read from the built object, in the certificate's canonical comparable form
(reprokit/kits/framework_free/parting.py): padding as (top, bottom, left, right), BatchNorm's momentum as the weight of
the new batch, axes of the canonical NHWC layout. reprokit/kits/tensorflow_kit/layer_settings.py gives Keras's the same
keys.
"""
from __future__ import annotations

from typing import Any

from torch import nn


def _pair(v: Any) -> list[int]:
    return [int(x) for x in v] if isinstance(v, (tuple, list)) else [int(v), int(v)]


def _same_padding(size: list[int], kernel: list[int], stride: list[int], dilation: list[int]) -> list[int]:
    """What 'same' pads, (top, bottom, left, right): the extra row or column at the bottom and right."""
    out = []
    for n, k, s, d in zip(size, kernel, stride, dilation):
        total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        out += [total // 2, total - total // 2]
    return out


def _padding(p: Any, size: list[int], kernel: list[int], stride: list[int], dilation: list[int]) -> list[int]:
    if p == "same":
        return _same_padding(size, kernel, stride, dilation)
    if p == "valid":
        return [0, 0, 0, 0]
    h, w = _pair(p)
    return [h, h, w, w]


_ACTIVATIONS = {nn.ReLU: "relu", nn.ELU: "elu", nn.LeakyReLU: "leaky_relu", nn.GELU: "gelu", nn.Sigmoid: "sigmoid",
                nn.Tanh: "tanh", nn.SiLU: "silu", nn.Softmax: "softmax", nn.ReLU6: "relu", nn.Hardtanh: "hardtanh",
                nn.Softplus: "softplus", nn.Mish: "mish"}


def _activation(m: nn.Module) -> dict[str, Any]:
    name = next(v for k, v in _ACTIVATIONS.items() if type(m) is k)
    out: dict[str, Any] = {"activation": name}
    if isinstance(m, nn.ReLU6):
        out["max_value"] = 6.0
    elif isinstance(m, nn.Hardtanh):
        out.update(min_value=float(m.min_val), max_value=float(m.max_val))
    elif isinstance(m, nn.LeakyReLU):
        out["negative_slope"] = float(m.negative_slope)
    elif isinstance(m, nn.ELU):
        out["alpha"] = float(m.alpha)
    elif isinstance(m, nn.GELU):
        out["approximate"] = m.approximate != "none"
    elif isinstance(m, nn.Softmax):
        out["axis"] = "channels" if m.dim in (1, -1, None) else m.dim
    return out


def read(m: nn.Module, in_shape: list[int]) -> tuple[str, dict[str, Any]]:
    """(family, settings) of a module called on an input of canonical (NHWC) shape ``in_shape``."""
    size = in_shape[1:3] if len(in_shape) == 4 else [1, 1]
    if isinstance(m, nn.Conv2d):
        kernel, stride, dilation = _pair(m.kernel_size), _pair(m.stride), _pair(m.dilation)
        return "conv", {"filters": m.out_channels, "kernel": kernel, "strides": stride,
                        "padding": _padding(m.padding, size, kernel, stride, dilation), "dilation": dilation,
                        "groups": m.groups, "bias": m.bias is not None, "padding_mode": m.padding_mode}
    if isinstance(m, nn.Linear):
        return "dense", {"units": m.out_features, "bias": m.bias is not None}
    if isinstance(m, nn.modules.batchnorm._BatchNorm):
        return "batchnorm", {"epsilon": float(m.eps), "momentum": None if m.momentum is None else float(m.momentum),
                             "axis": [len(in_shape) - 1], "center": m.affine, "scale": m.affine,
                             "running_statistics": m.track_running_stats}
    if type(m) in _ACTIVATIONS:
        return "activation", _activation(m)
    if isinstance(m, (nn.MaxPool2d, nn.AvgPool2d)):
        kernel = _pair(m.kernel_size)
        stride = _pair(m.stride) if m.stride else kernel
        out: dict[str, Any] = {"pool": "max" if isinstance(m, nn.MaxPool2d) else "avg", "pool_size": kernel,
                               "strides": stride, "padding": _padding(m.padding, size, kernel, stride, [1, 1]),
                               "ceil_mode": bool(m.ceil_mode)}
        out["dilation"] = _pair(m.dilation) if isinstance(m, nn.MaxPool2d) else [1, 1]
        if isinstance(m, nn.AvgPool2d) and any(out["padding"]):
            out["count_include_pad"] = bool(m.count_include_pad)
        return "pool", out
    if isinstance(m, (nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)):
        return "pool", {"pool": "avg" if isinstance(m, nn.AdaptiveAvgPool2d) else "max",
                        "output_size": _pair(m.output_size)}
    if isinstance(m, nn.modules.dropout._DropoutNd):
        kind = ("channel" if isinstance(m, (nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)) else
                "alpha" if isinstance(m, nn.AlphaDropout) else "element")
        return "dropout", {"rate": float(m.p), "kind": kind}
    if isinstance(m, nn.Flatten):
        return "flatten", {}
    if isinstance(m, (nn.ZeroPad2d, nn.ConstantPad2d)):
        left, right, top, bottom = (int(v) for v in m.padding)      # torch keeps (left, right, top, bottom)
        return "pad", {"padding": [top, bottom, left, right], "value": float(m.value)}
    if isinstance(m, nn.Identity):
        return "identity", {}
    return type(m).__name__.lower(), _own(m)


def _own(m: nn.Module) -> dict[str, Any]:
    """A module of the user's own: its public attributes of plain values."""
    plain = (bool, int, float, str)
    every = set(vars(nn.Module()))
    return {k: list(v) if isinstance(v, tuple) else v for k, v in vars(m).items()
            if not k.startswith("_") and k not in every and (isinstance(v, plain) or (
                isinstance(v, tuple) and all(isinstance(x, plain) for x in v)))}

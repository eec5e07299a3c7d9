"""A Flax NNX (or linen) module's settings, read from the built object, under the keys the other kits give
(reprokit/kits/framework_free/parting.py): padding as (top, bottom, left, right), BatchNorm's momentum as the weight of
the new batch (Flax keeps the weight of the old running value, as Keras), axes of the NHWC layout.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
from flax import nnx

from reprokit.kits.jax_kit import models


def _pair(v: Any) -> list[int]:
    return [int(x) for x in v] if isinstance(v, (tuple, list)) else [int(v), int(v)]


def _padding(p: Any, size: list[int], kernel: list[int], stride: list[int], dilation: list[int]) -> list[int] | str:
    """Flax's padding ("SAME", "VALID", an int, or (low, high) pairs) as (top, bottom, left, right)."""
    if isinstance(p, str):
        if p.upper() == "VALID":
            return [0, 0, 0, 0]
        if p.upper() != "SAME":
            return p.lower()                      # CIRCULAR, REFLECT, CAUSAL: named as Flax names them
        out = []
        for n, k, s, d in zip(size, kernel, stride, dilation):
            total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
            out += [total // 2, total - total // 2]
        return out
    if isinstance(p, int):
        return [p, p, p, p]
    pairs = [_pair(x) if isinstance(x, (tuple, list)) else [int(x), int(x)] for x in p]
    return [v for pair in pairs for v in pair]


def read(m: nnx.Module | nn.Module, in_shape: list[int]) -> tuple[str, dict[str, Any]]:
    """(family, settings) of a module (NNX, or linen: the same fields, ``features`` for ``out_features``) called
    on an input of (NHWC) shape ``in_shape``."""
    size = in_shape[1:3] if len(in_shape) == 4 else [1, 1]
    if isinstance(m, nn.Module):
        return _linen(m, size, in_shape)
    if isinstance(m, nnx.Conv):
        kernel, stride = _pair(m.kernel_size), _pair(m.strides or 1)
        dilation = _pair(m.kernel_dilation or 1)
        return "conv", {"filters": int(m.out_features), "kernel": kernel, "strides": stride,
                        "padding": _padding(m.padding, size, kernel, stride, dilation), "dilation": dilation,
                        "groups": int(m.feature_group_count), "bias": bool(m.use_bias), "padding_mode": "zeros"}
    if isinstance(m, nnx.Linear):
        return "dense", {"units": int(m.out_features), "bias": bool(m.use_bias)}
    if isinstance(m, nnx.BatchNorm):
        axis = m.axis if isinstance(m.axis, (tuple, list)) else [m.axis]
        return "batchnorm", {"epsilon": float(m.epsilon), "momentum": round(1.0 - float(m.momentum), 12),
                             "axis": [int(a) % len(in_shape) for a in axis], "center": bool(m.use_bias),
                             "scale": bool(m.use_scale), "running_statistics": True}
    if isinstance(m, models.ReLU):
        return "activation", {"activation": "relu"}
    if isinstance(m, models.MaxPool):
        return "pool", {"pool": "max", "pool_size": [2, 2], "strides": [2, 2], "padding": [0, 0, 0, 0],
                        "ceil_mode": False, "dilation": [1, 1]}
    if isinstance(m, models.GlobalAveragePool):
        return "pool", {"pool": "avg", "output_size": [1, 1]}
    if isinstance(m, nnx.Dropout):
        # broadcast_dims (1, 2) of NHWC shares one draw over height and width: channel dropout
        shared = {int(d) % max(len(in_shape), 1) for d in m.broadcast_dims}
        kind = "channel" if len(in_shape) == 4 and shared == {1, 2} else "element" if not shared else "shared"
        return "dropout", {"rate": float(m.rate), "kind": kind}
    if isinstance(m, models.Flatten):
        return "flatten", {}
    return type(m).__name__.lower(), _own(m)


def _linen(m: nn.Module, size: list[int], in_shape: list[int]) -> tuple[str, dict[str, Any]]:
    if isinstance(m, nn.Conv):
        kernel, stride = _pair(m.kernel_size), _pair(m.strides or 1)
        dilation = _pair(m.kernel_dilation or 1)
        return "conv", {"filters": int(m.features), "kernel": kernel, "strides": stride,
                        "padding": _padding(m.padding, size, kernel, stride, dilation), "dilation": dilation,
                        "groups": int(m.feature_group_count), "bias": bool(m.use_bias), "padding_mode": "zeros"}
    if isinstance(m, nn.Dense):
        return "dense", {"units": int(m.features), "bias": bool(m.use_bias)}
    if isinstance(m, nn.BatchNorm):
        axis = m.axis if isinstance(m.axis, (tuple, list)) else [m.axis]
        return "batchnorm", {"epsilon": float(m.epsilon), "momentum": round(1.0 - float(m.momentum), 12),
                             "axis": [int(a) % len(in_shape) for a in axis], "center": bool(m.use_bias),
                             "scale": bool(m.use_scale), "running_statistics": True}
    if isinstance(m, nn.Dropout):
        shared = {int(d) % max(len(in_shape), 1) for d in m.broadcast_dims}
        kind = "channel" if len(in_shape) == 4 and shared == {1, 2} else "element" if not shared else "shared"
        return "dropout", {"rate": float(m.rate), "kind": kind}
    plain = (bool, int, float, str)
    return type(m).__name__.lower(), {f.name: getattr(m, f.name) for f in dataclasses.fields(m)
                                      if f.name not in ("parent", "name") and isinstance(getattr(m, f.name), plain)}


def _own(m: nnx.Module) -> dict[str, Any]:
    """A module of the user's own: its public attributes of plain values."""
    plain = (bool, int, float, str)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in vars(m).items()
            if not k.startswith("_") and (isinstance(v, plain) or (
                isinstance(v, tuple) and all(isinstance(x, plain) for x in v)))}

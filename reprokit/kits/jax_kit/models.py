"""The spec's models in Flax NNX, NHWC, built layer for layer like the PyTorch and Keras ones.

The layers without parameters are small named modules (not bare functions in the Sequential), so the
certificate and the settings read-back can find each layer by its type. Flatten reads (h, w, c), as
Keras does. The seed posts' pitfalls are PyTorch's and TensorFlow's; the JAX kit reproduces none.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from reprokit.kits.contract.names import SIMPLECNN_BLOCKS, VGG16_BLOCKS, scaled_width
from reprokit.kits.contract.spec import Init, Model, RunSpec
from reprokit.kits.framework_free import custom

# The spec's initializer names; both draw from a uniform bound, as torch's xavier_/kaiming_uniform_ and
# Keras's of the same names (fan-in of a (kh, kw, in, out) kernel is kh * kw * in).
INITIALIZERS = {"glorot_uniform": jax.nn.initializers.glorot_uniform(),
                "he_uniform": jax.nn.initializers.he_uniform()}
BIAS_INITIALIZERS = {"zeros": jax.nn.initializers.zeros}


class ReLU(nnx.Module):
    def __call__(self, x: jax.Array) -> jax.Array:
        return nnx.relu(x)


class MaxPool(nnx.Module):
    """2x2 windows, stride 2, no padding (torch's MaxPool2d(2, 2), Keras's MaxPooling2D(2, 2))."""

    def __call__(self, x: jax.Array) -> jax.Array:
        return nnx.max_pool(x, window_shape=(2, 2), strides=(2, 2), padding="VALID")


class GlobalAveragePool(nnx.Module):
    """The mean over height and width (torch's AdaptiveAvgPool2d(1) then Flatten, Keras's GlobalAveragePooling2D)."""

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.mean(x, axis=(1, 2))


class Flatten(nnx.Module):
    """NHWC rows in (h, w, c) order."""

    def __call__(self, x: jax.Array) -> jax.Array:
        return x.reshape(x.shape[0], -1)


def _conv(channels: int, out: int, init: Init, rngs: nnx.Rngs, dtype: Any) -> nnx.Conv:
    return nnx.Conv(channels, out, (3, 3), padding="SAME", kernel_init=INITIALIZERS[init.conv],
                    bias_init=BIAS_INITIALIZERS[init.bias], dtype=dtype, rngs=rngs)


def _dense(features: int, out: int, init: Init, rngs: nnx.Rngs, dtype: Any) -> nnx.Linear:
    return nnx.Linear(features, out, kernel_init=INITIALIZERS[init.dense], bias_init=BIAS_INITIALIZERS[init.bias],
                      dtype=dtype, rngs=rngs)


def vgg16(cfg: Model, input_size: int, rngs: nnx.Rngs, dtype: Any = None) -> nnx.Sequential:
    assert cfg.init is not None and cfg.classifier_width is not None and isinstance(cfg.dropout, float)
    layers: list[nnx.Module] = []
    channels = 3
    for block in VGG16_BLOCKS:
        for width in block:
            out = scaled_width(width, cfg.width_multiplier)
            layers += [_conv(channels, out, cfg.init, rngs, dtype), ReLU()]
            channels = out
        layers.append(MaxPool())
    spatial = input_size // 32
    hidden = cfg.classifier_width
    layers += [
        Flatten(),
        _dense(channels * spatial * spatial, hidden, cfg.init, rngs, dtype), ReLU(),
        nnx.Dropout(cfg.dropout, rngs=rngs),
        _dense(hidden, hidden, cfg.init, rngs, dtype), ReLU(), nnx.Dropout(cfg.dropout, rngs=rngs),
        _dense(hidden, cfg.num_classes, cfg.init, rngs, dtype),
    ]
    return nnx.Sequential(*layers)


def simplecnn(cfg: Model, rngs: nnx.Rngs, dtype: Any = None) -> nnx.Sequential:
    """Conv-ReLU-Dropout-BatchNorm blocks as posted; one BatchNorm per conv, logits out."""
    assert cfg.init is not None and cfg.batchnorm is not None and isinstance(cfg.dropout, list)
    p12, p34, p5 = cfg.dropout
    rates = [p12, p12, p34, p34, p5]
    # Channel dropout drops whole feature maps: one draw per (sample, channel), shared over h and w.
    spatial_dims = (1, 2) if cfg.dropout_kind == "channel" else ()
    bn = cfg.batchnorm
    layers: list[nnx.Module] = []
    channels = 3
    for i, block in enumerate(SIMPLECNN_BLOCKS):
        for width in block:
            out = scaled_width(width, cfg.width_multiplier)
            layers += [_conv(channels, out, cfg.init, rngs, dtype), ReLU(),
                       nnx.Dropout(rates[i], broadcast_dims=spatial_dims, rngs=rngs),
                       # Flax's momentum is the keep factor, as Keras's; the two-pass variance, as the others
                       nnx.BatchNorm(out, momentum=bn.momentum_keep, epsilon=bn.epsilon, use_fast_variance=False,
                                     dtype=dtype, rngs=rngs)]
            channels = out
        layers.append(MaxPool() if i < len(SIMPLECNN_BLOCKS) - 1 else GlobalAveragePool())
    layers += [nnx.Dropout(p5, rngs=rngs), _dense(channels, cfg.num_classes, cfg.init, rngs, dtype)]
    return nnx.Sequential(*layers)


def build_model(cfg: Model, input_size: int, rngs: nnx.Rngs, dtype: Any = None) -> nnx.Module:
    """The spec's model; a custom one from the user's builder, called as the other kits call theirs
    (options, input_size, num_classes): it makes its own nnx.Rngs (the options may carry its seed).

    ``dtype``: the layers' compute dtype (None: the parameters', float32); the parameters stay float32,
    Flax's own mixed precision."""
    if cfg.name == "custom":
        model: nnx.Module = custom.build(builder_ref(cfg), cfg.options, input_size, cfg.num_classes, nnx.Module,
                                         "flax.nnx.Module", "JAX")
        return model
    if cfg.name == "vgg16":
        return vgg16(cfg, input_size, rngs, dtype)
    if cfg.name == "simplecnn":
        return simplecnn(cfg, rngs, dtype)
    raise ValueError(f"the JAX kit has no built-in {cfg.name} "
                     f"(reprokit/kits/jax_kit/limits.py refuses it before a run)")


def compute_dtype(spec: RunSpec) -> Any:
    """bf16_mixed: bfloat16 compute over float32 parameters; else float32 throughout (None)."""
    return jnp.bfloat16 if spec.numerics.precision == "bf16_mixed" else None


def build(spec: RunSpec, rngs: nnx.Rngs | None = None) -> nnx.Module:
    """The run's model at the spec's precision; its parameters and dropout keys from ``rngs`` (default:
    nnx.Rngs(the spec's seed))."""
    rngs = rngs if rngs is not None else nnx.Rngs(spec.train.seed)
    return build_model(spec.model, spec.data.input_size, rngs, compute_dtype(spec))


def builder_ref(cfg: Model) -> str:
    """The user's JAX builder, "module:function", or one sentence on where to name it."""
    ref: Any = cfg.builder("jax")
    if not ref:
        raise custom.BadModel("the custom model names no JAX builder: give model.jax = \"module:function\" "
                              "(a function of (options, input_size, num_classes) returning a flax.nnx.Module) "
                              "or run it without jax in --frameworks")
    return str(ref)


def parameter_counts(model: nnx.Module) -> dict[str, int]:
    """Trainable parameters, and a total that counts BatchNorm's running statistics too, as the other kits do."""
    trainable = sum(int(p.size) for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
    stats = sum(int(s.size) for s in jax.tree.leaves(nnx.state(model, nnx.BatchStat)))
    return {"total": trainable + stats, "trainable": trainable}

"""The JAX kit's conventions, as it declares them to the certificate (standard library only).

Each entry names a field of the certificate's declared differences (the same field names as the
PyTorch/TensorFlow table in reprokit/certify/differences.py), what the JAX kit does, why it may
differ from the reference and how the certificate handles it. The JAX side writes them into its
side.json; the host pairs them with the reference's column. ``same_as_reference`` marks a convention
that is the reference's own form, declared so that a reader sees it was looked at.
"""
from __future__ import annotations

from typing import Any


def _entry(field: str, jax: str, why: str, handled: str, same: bool = False) -> dict[str, Any]:
    return {"field": field, "jax": jax, "why": why, "handled": handled, "same_as_reference": same}


def _optimizer(opt: dict[str, Any]) -> list[dict[str, Any]]:
    if opt["name"] == "adam":
        return [_entry("Adam epsilon placement", "optax.adam: lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t)) + eps)",
                       "the same form as torch.optim.Adam (eps added to the bias-corrected sqrt(v)), with the same "
                       f"eps ({opt['epsilon']:g})",
                       "nothing to remove between the two; the JAX reference steps take the per-step values the "
                       "PyTorch side sets for every pair (see neutralised)", same=True)]
    if opt.get("momentum"):
        return [_entry("SGD momentum form", "optax.sgd: v = m*v + g; p -= lr*v (optax.trace)",
                       "the same form as torch.optim.SGD, Nesterov included (g + m*v)",
                       "checked: the fp64 trajectory compares the two", same=True)]
    return []


def _batchnorm(bn: dict[str, Any]) -> list[dict[str, Any]]:
    keep = bn["momentum_keep"]
    return [_entry("BatchNorm momentum convention",
                   f"ra = momentum * ra + (1 - momentum) * batch, momentum = {keep:g} (nnx.BatchNorm)",
                   "the opposite convention to PyTorch's for the same update",
                   "mapped by both kits from one spec value, model.batchnorm.momentum_keep"),
            _entry("BatchNorm running variance", "updated with the biased batch variance",
                   "both normalise with the biased variance in training; only the running statistics used in "
                   "evaluation differ, by n / (n - 1) per update (n = batch x height x width)",
                   "not removable; shows in the moving variance after the steps (informational)"),
            _entry("BatchNorm epsilon default", "1e-5 (nnx.BatchNorm)", "the same default as PyTorch's",
                   f"both set from the spec, model.batchnorm.epsilon = {bn['epsilon']:g}", same=True)]


def _initializers(init: dict[str, Any] | None) -> dict[str, Any]:
    if init is None:
        return _entry("initializers", "the user's builder", "a custom model initialises itself",
                      "the certificate loads PyTorch's initial weights into JAX")
    return _entry("initializers", f"{init['conv']} / {init['dense']} via jax.nn.initializers, bias {init['bias']}; "
                  "not Flax's default lecun_normal",
                  "the same distributions from different random streams: the timed runs start from different draws",
                  "the certificate loads PyTorch's initial weights into JAX")


def declared(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """What the JAX kit does differently from (or, marked, as) the reference, for this experiment's settings."""
    model = spec["model"]
    out = [_entry("data layout", "NHWC",
                  "Flax's native layout for convolutions (HWIO kernels, (in, out) dense kernels)",
                  "weights move between OIHW/(out, in) and HWIO/(in, out); the batches are NHWC as prepared"),
           _entry("execution", "jax.jit (XLA), the whole train step compiled, its state donated",
                  "the idiomatic fast path of JAX; XLA may fuse and reorder floating-point operations",
                  "the certificate's steps are jitted too; no effect beyond rounding"),
           *_optimizer(spec["train"]["optimizer"]),
           *(_batchnorm(model["batchnorm"]) if model["name"] == "simplecnn" else ()),
           _initializers(model.get("init")),
           _entry("padding rules", "nnx.Conv(3, padding='SAME'), max_pool(2, 2, 'VALID')",
                  "identical to PyTorch's padding=1 for 3x3 stride-1 convolutions; 'SAME' pads more at the bottom "
                  "and right for even kernels or strides above 1, which these models do not use",
                  "checked: the padding each convolution and pooling applied is compared (layers without "
                  "parameters), and the logits of the same weights")]
    if model["name"] == "vgg16":
        out.append(_entry("flatten order", "NHWC feature map flattened as (h, w, c)",
                          "the first dense layer sees the same numbers in another order",
                          "each kit follows its own flatten in its trace; the rows are permuted when weights move "
                          "between the frameworks"))
    out.append(_entry("dropout masks", "jax.random (threefry) keys from nnx.Rngs(seed), one per step",
                      "the timed runs drop different units",
                      "dropout is off in the logits and the trajectories; the dropout check compares training-mode "
                      "outputs over many masks in each framework, and the trace compares rates and masks"))
    return out

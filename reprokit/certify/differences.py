"""What a certificate lists beside its checks: where the two specs differ (``spec_differences``), and the
semantic differences between the two frameworks (``declared_differences``), the experiment's own first, then
the pair's known ones, each with how the certificate handles it.

The known ones are a hand-written table for the PyTorch/TensorFlow pair of kits; another pair's are what its
sides declare of their own kits' conventions (reprokit/kits/<name>_kit/conventions.py), known once the sides have run.
"""
from __future__ import annotations

import math
from typing import Any

from reprokit.certify.certify_sides import pair_of as _pair
from reprokit.kits.contract.names import REFERENCE, label


def spec_differences(a: dict[str, Any], b: dict[str, Any], prefix: str = "",
                     labels: tuple[str, str] | None = None) -> list[str]:
    """Fields of the model, data, train and numerics sections where two RunSpecs differ (``labels``: their
    frameworks', by default the specs' own)."""
    out = []
    labels = labels or (label(a["framework"]), label(b["framework"]))
    keys = ("model", "data", "train", "numerics", "pitfalls") if not prefix else sorted(set(a) | set(b))
    for key in keys:
        x, y = a.get(key), b.get(key)
        name = f"{prefix}{key}"
        if isinstance(x, dict) and isinstance(y, dict):
            out += spec_differences(x, y, name + ".", labels)
        elif x != y and not (name == "data.file" or name.startswith("data.sha")):
            out.append(f"{name}: {labels[0]} {x!r}, {labels[1]} {y!r}")
    return out


# Differences every pair of PyTorch and TensorFlow kit runs has, whatever the experiment's settings (the known
# differences are of that pair of kits: another framework's pair declares none until someone writes them).
_LAYOUT = {"field": "data layout", "pytorch": "NCHW", "tensorflow": "NHWC",
           "why": "each framework's native layout for convolutions",
           "handled": "weights move between OIHW/(out, in) and HWIO/(in, out); the PyTorch kit transposes its "
                      "NHWC batches once on the device"}
_EXECUTION = {"field": "execution", "pytorch": "eager", "tensorflow": "tf.function graph (no XLA)",
              "why": "the idiomatic fast path of each framework",
              "handled": "the certificate's steps run the same way; no effect beyond rounding"}
_PADDING = {"field": "padding rules",
            "pytorch": "Conv2d(3, padding=1), MaxPool2d(2, 2) (floor)",
            "tensorflow": "Conv2D(3, padding='same'), MaxPooling2D(2, 2) ('valid')",
            "why": "identical for 3x3 stride-1 convolutions and 2x2 stride-2 pooling; 'same' pads more at the "
                   "bottom and right for even kernels or strides above 1, which these models do not use",
            "handled": "checked: the padding each convolution and pooling applied is compared (layers without "
                       "parameters), and the logits of the same weights"}
_FLATTEN = {"field": "flatten order",
            "pytorch": "NCHW feature map flattened as (c, h, w)",
            "tensorflow": "NHWC feature map flattened as (h, w, c)",
            "why": "the first dense layer sees the same numbers in another order",
            "handled": "each kit follows its own flatten in its trace; the rows are permuted when weights move "
                       "between the frameworks"}
_DROPOUT_MASKS = {"field": "dropout masks",
                  "pytorch": "torch's random stream", "tensorflow": "Keras's seed generator",
                  "why": "the timed runs drop different units",
                  "handled": "dropout is off in the logits and the trajectories; the dropout check compares "
                             "training-mode outputs over many masks in each framework, and the trace compares "
                             "rates and masks"}
_BN_VARIANCE = {"field": "BatchNorm running variance",
                "pytorch": "updated with the unbiased batch variance (times n / (n - 1))",
                "tensorflow": "updated with the biased batch variance",
                "why": "both normalise with the biased variance in training; only the running statistics "
                       "used in evaluation differ, by n / (n - 1) per update (n = batch x height x width)",
                "handled": "not removable; shows in the moving variance after the steps (informational)"}


def _known_differences(spec: dict[str, Any], pair: tuple[str, str]) -> list[dict[str, Any]]:
    """Semantic differences between the frameworks that this experiment's settings touch."""
    if pair != KNOWN_PAIR:
        return []
    model = spec["model"]
    return [_LAYOUT, _EXECUTION, *_optimizer_differences(spec["train"]["optimizer"]),
            *(_batchnorm_differences(model["batchnorm"]) if model["name"] == "simplecnn" else ()),
            _initializers(model.get("init")), _PADDING, *((_FLATTEN,) if model["name"] == "vgg16" else ()),
            _DROPOUT_MASKS]


def _optimizer_differences(opt: dict[str, Any]) -> list[dict[str, Any]]:
    if opt["name"] == "adam":
        return [{"field": "Adam epsilon placement",
                 "pytorch": "lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)",
                 "tensorflow": "lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)",
                 "why": f"Keras's eps acts as eps / sqrt(1 - beta2^t) in PyTorch's formula: "
                        f"{1 / math.sqrt(1 - opt['beta2']):.1f}x at step 1, fading with t; the same eps "
                        f"({opt['epsilon']:g}) is declared for both",
                 "handled": "removed from both certified trajectories, fp64 and fp32 (PyTorch's eps set step by "
                            "step); in effect in the timed runs"}]
    if opt.get("momentum"):
        return [{"field": "SGD momentum form",
                 "pytorch": "v = m*v + g; p -= lr*v",
                 "tensorflow": "v = m*v - lr*g; p += v",
                 "why": "identical while the learning rate is constant, as it is in the certificate's steps; "
                        "they part when a scheduler changes lr (the PyTorch side's ReduceLROnPlateau pitfall)",
                 "handled": "checked: the fp64 trajectory compares the two forms (PyTorch given Keras's "
                            "float32-rounded momentum, see neutralised)"}]
    return []


def _batchnorm_differences(bn: dict[str, Any]) -> list[dict[str, Any]]:
    keep = bn["momentum_keep"]
    return [{"field": "BatchNorm momentum convention",
             "pytorch": f"running = (1 - momentum) * running + momentum * batch, momentum = {1 - keep:g}",
             "tensorflow": f"moving = momentum * moving + (1 - momentum) * batch, momentum = {keep:g}",
             "why": "opposite conventions for the same update",
             "handled": "mapped by both kits from one spec value, model.batchnorm.momentum_keep"},
            _BN_VARIANCE,
            {"field": "BatchNorm epsilon default", "pytorch": "1e-5", "tensorflow": "1e-3",
             "why": "different defaults",
             "handled": f"both set from the spec, model.batchnorm.epsilon = {bn['epsilon']:g}"}]


def _initializers(init: dict[str, Any] | None) -> dict[str, Any]:
    if init is None:
        return {"field": "initializers", "pytorch": "the user's builder", "tensorflow": "the user's builder",
                "why": "a custom model initialises itself",
                "handled": "the certificate loads PyTorch's initial weights into TensorFlow"}
    return {"field": "initializers",
            "pytorch": f"{init['conv']} / {init['dense']} via nn.init (kaiming_uniform_(relu) = he_uniform, "
                       f"xavier_uniform_ = glorot_uniform), bias zeros; not PyTorch's default "
                       f"kaiming_uniform_(a=sqrt(5))",
            "tensorflow": f"{init['conv']} / {init['dense']}, bias {init['bias']}",
            "why": "the same distributions from different random streams: the timed runs start from "
                   "different draws",
            "handled": "the certificate loads PyTorch's initial weights into TensorFlow"}


KNOWN_PAIR = ("pytorch", "tensorflow")       # the pair _known_differences knows


# A declared run-time setting (a [[differences]] key) the certificate's table has no entry for.
SETTING_HANDLED = ("a run-time setting: each run reads it back and the report's settings table compares it; the "
                   "certificate does not change it")


def _conventions(side: dict[str, Any] | None) -> list[dict[str, Any]]:
    """What a side declares of its own kit's conventions (reprokit/kits/<name>_kit/conventions.py), if anything."""
    return list(((side or {}).get("environment") or {}).get("conventions") or [])


def _paired_conventions(spec: dict[str, Any], pair: tuple[str, str],
                        sides: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A pair without a hand-written table: each convention the other side declares, beside the reference's
    column (the reference's own declaration of that field, else its column of the PyTorch/TensorFlow table)."""
    ref, other = pair
    column = ({d["field"].lower(): d[ref] for d in _known_differences(spec, KNOWN_PAIR)}
              if ref in KNOWN_PAIR else {})
    column.update({d["field"].lower(): d[ref] for d in _conventions(sides.get(ref)) if ref in d})
    out = []
    for d in _conventions(sides.get(other)):
        entry = {"field": d["field"], ref: column.get(d["field"].lower(), "not declared"), other: d.get(other),
                 "why": d.get("why"), "handled": d.get("handled")}
        out.append({**entry, "same_as_reference": True} if d.get("same_as_reference") else entry)
    return out


def declared_differences(specs: dict[str, dict[str, Any]],
                         sides: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The experiment's own declared differences, then the pair's known ones: the hand-written table of
    KNOWN_PAIR, or, for another pair, what its sides declare (known once the sides have run)."""
    pair = _pair(specs)
    spec = specs[REFERENCE]
    own: list[dict[str, Any]] = []
    for s in (specs[fw] for fw in pair):
        for d in s.get("differences", []):        # one that sets apart only a framework outside the pair is not its
            if d not in own and str(d.get(pair[0])) != str(d.get(pair[1])):
                own.append(d)
    fields = {d["field"].lower() for d in own}
    table = _known_differences(spec, pair) if pair == KNOWN_PAIR else _paired_conventions(spec, pair, sides or {})
    known = [{**d, "source": "certificate"} for d in table if d["field"].lower() not in fields]
    by_field = {d["field"].lower(): d for d in table}
    declared = [{**d, "source": "spec", **({"handled": by_field[d["field"].lower()]["handled"]}
                                          if d["field"].lower() in by_field else
                                          {"handled": SETTING_HANDLED} if d.get("key") else {})} for d in own]
    return declared + known

"""A model's arithmetic and its layers without parameters, in one canonical form for both frameworks.

Each framework traces one forward pass of its model (reprokit/kits/pytorch_kit/trace.py: the aten ops a
TorchDispatchMode sees; reprokit/kits/tensorflow_kit/trace.py: the ops of the traced tf.Graph) and writes
the ops it recognises, in execution order, as the records below. Everything else (bias adds,
reshapes, casts, the BatchNorm arithmetic) is left out, so the same model written differently
gives the same list.

- ``conv``: kernel, channels in/out, groups, stride, dilation, output size, and the padding
  actually applied (top, bottom, left, right), an explicit zero-padding layer folded in;
- ``matmul``: rows per sample, inner and output size (a dense layer: 1 x in x out);
- layers without parameters: ``activation`` (relu, relu6, leaky_relu, elu, softmax,
  log_softmax), ``pool`` (max/avg, window, stride, padding), ``reduce`` (mean or max over named
  axes: global pooling), ``norm`` (the axes a normalisation takes its statistics over),
  ``dropout`` (rate, and the axes its mask is shared over), ``pad`` (one not folded into a conv or, at
  -inf, a max pool), ``add`` (two feature maps of one shape: a residual connection).

Axes are named, not numbered, so NCHW and NHWC agree: N (batch), C, H, W; F for a flat feature axis.

Training FLOPs by rule (2 FLOPs per multiply-accumulate): the forward pass of every conv and
matmul, plus in the backward pass, for each operand that depends on a trainable parameter
(``grads``: ``input`` and/or ``weight``), one product of the same size as the forward. So the
first convolution has no input gradient (the image needs none), a frozen layer no weight gradient.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

ARITHMETIC = ("conv", "matmul")
ELEMENTWISE = ("activation", "dropout")          # commute with each other: compared as a set per run
HOW = ("canonical convolutions and matrix products of one traced forward pass at the run's input size, "
       "2 FLOPs per multiply-accumulate; backward: one product of the forward's size per operand that "
       "depends on a trainable parameter (input and weight gradients; none for the input image)")


def axis_names(rank: int, layout: str) -> list[str]:
    """Names of a tensor's axes: layout "channels_first" (NCHW) or "channels_last" (NHWC)."""
    if rank == 2:
        return ["N", "F"]
    spatial = ["H", "W"] if rank == 4 else ["L"] if rank == 3 else [f"S{i}" for i in range(rank - 2)]
    return ["N", "C", *spatial] if layout == "channels_first" else ["N", *spatial, "C"]


def ordered(axes: Iterable[str]) -> list[str]:
    """Axis names in one order (N, then spatial, then C, F), whatever the layout."""
    rank = {"N": 0, "H": 1, "W": 2, "L": 1, "C": 8, "F": 9}
    return sorted(set(axes), key=lambda a: (rank.get(a, 5), a))


def window_padding(size_in: int, size_out: int, kernel: int, stride: int, dilation: int, start: int) -> list[int]:
    """(before, after) padding that a window op of these sizes applied: after may be negative when the
    last rows of the input are not used (floor mode), so every framework's convention maps to one form."""
    span = (size_out - 1) * stride + (kernel - 1) * dilation + 1
    return [int(start), int(span - size_in - start)]


def same_padding_start(size_in: int, kernel: int, stride: int, dilation: int) -> int:
    """Where TensorFlow's padding='SAME' starts: half the total, the extra one at the end."""
    out = -(-size_in // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size_in, 0)
    return total // 2


def conv(kernel: Sequence[int], cin: int, cout: int, groups: int, stride: Sequence[int], dilation: Sequence[int],
         size_in: Sequence[int], size_out: Sequence[int], start: Sequence[int], batch: int,
         grads: list[str]) -> dict[str, Any]:
    """A convolution's record; ``start`` is the padding before each spatial axis, ``size_in`` the input's
    spatial size before any padding."""
    padding: list[int] = []
    for i, k in enumerate(kernel):
        padding += window_padding(size_in[i], size_out[i], k, stride[i], dilation[i], start[i])
    macs = math.prod(size_out) * cout * (cin // groups) * math.prod(kernel)
    return {"op": "conv", "kernel": list(kernel), "channels": [cin, cout], "groups": groups, "stride": list(stride),
            "dilation": list(dilation), "output": list(size_out), "padding": padding, "macs": macs,
            "grads": grads}


def matmul(rows: float, inner: int, cols: int, batch: int, grads: list[str]) -> dict[str, Any]:
    """A matrix product of (rows x inner) by (inner x cols); ``rows`` over the whole batch."""
    per_sample = rows / batch
    per_sample = int(per_sample) if float(per_sample).is_integer() else per_sample
    return {"op": "matmul", "rows": per_sample, "inner": int(inner), "cols": int(cols),
            "macs": per_sample * inner * cols, "grads": grads}


def pool(kind: str, window: Sequence[int], stride: Sequence[int], size_in: Sequence[int], size_out: Sequence[int],
         start: Sequence[int], count_padding: bool | None = None) -> dict[str, Any]:
    padding: list[int] = []
    for i, k in enumerate(window):
        padding += window_padding(size_in[i], size_out[i], k, stride[i], 1, start[i])
    padded = any(p > 0 for p in padding)
    return {"op": "pool", "kind": kind, "window": list(window), "stride": list(stride), "padding": padding,
            "output": list(size_out), "count_padding": count_padding if padded and kind == "avg" else None}


def activation(kind: str, parameter: float | str | None = None) -> dict[str, Any]:
    return {"op": "activation", "kind": kind, "parameter": parameter}


def residual_add() -> dict[str, Any]:
    return {"op": "add", "kind": "residual"}


def dropout(rate: float, mask_shape: Sequence[int], x_shape: Sequence[int], names: list[str]) -> dict[str, Any]:
    shared = [names[i] for i, (m, x) in enumerate(zip(mask_shape, x_shape)) if m == 1 and x > 1]
    return {"op": "dropout", "rate": round(float(rate), 6), "shared_over": ordered(shared)}


def flops(ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Training FLOPs per sample of a canonical op list, by the rule in the module's docstring."""
    arith = [o for o in ops if o["op"] in ARITHMETIC]
    forward = 2 * sum(o["macs"] for o in arith)
    backward = 2 * sum(o["macs"] * len(o["grads"]) for o in arith)
    # by kind: a framework may compute convolutions and matmuls in different precisions (PyTorch's TF32)
    by_kind = {kind: 2 * sum(o["macs"] * (1 + len(o["grads"])) for o in arith if o["op"] == kind)
               for kind in ARITHMETIC}
    return {"forward": forward, "backward": backward, "training": forward + backward,
            "training_by_op": {"convolution": by_kind["conv"], "matmul": by_kind["matmul"]},
            "convolutions": sum(o["op"] == "conv" for o in arith),
            "matrix_products": sum(o["op"] == "matmul" for o in arith)}


def canonical_rows(root_shape: Sequence[int], chain: list[tuple[str, list[int]]], layout: str) -> list[int] | None:
    """For a dense layer fed by a feature map through reshapes and transposes only: the canonical
    (h, w, c) position of each of its input features, or None when the chain is not a permutation of
    one sample's features (then the rows stay as they are).

    ``chain`` replays the framework's view ops on an index tensor: ("transpose", perm) or
    ("reshape", shape); ``root_shape`` is the feature map's shape in the framework's layout.
    """
    if len(root_shape) != 4:
        return None
    index = np.arange(math.prod(root_shape)).reshape(root_shape)
    for kind, arg in chain:
        index = np.transpose(index, arg) if kind == "transpose" else index.reshape(arg)
    per = math.prod(root_shape[1:])
    if index.ndim != 2 or index.shape[1] != per:
        return None
    row = index[0]
    if not np.array_equal(np.sort(row), np.arange(per)):
        return None
    if layout == "channels_first":
        c, h, w = root_shape[1:]
        ci, hi, wi = np.unravel_index(row, (c, h, w))
        row = (hi * w + wi) * c + ci
    return [int(r) for r in row]


def rows_to_canonical(kernel: np.ndarray, rows: list[int] | None) -> np.ndarray:
    """A dense kernel (in, out) with its rows moved to their canonical positions."""
    if rows is None:
        return kernel
    out = np.empty_like(kernel)
    out[np.asarray(rows)] = kernel
    return out


def rows_from_canonical(kernel: np.ndarray, rows: list[int] | None) -> np.ndarray:
    return kernel if rows is None else kernel[np.asarray(rows)]


# -- descriptions and comparisons ------------------------------------------------------------------

def _size(v: Iterable[float]) -> str:
    return "x".join(str(int(x)) for x in v)


def describe(op: dict[str, Any], with_padding: bool = True) -> str:
    """One op in words, e.g. "conv 3x3, 8->16 channels, stride 1, output 8x8"."""
    kind: str = op["op"]
    if kind == "conv":
        stride = _size(op["stride"]) if len(set(op["stride"])) > 1 else str(op["stride"][0])
        text = f"conv {_size(op['kernel'])}, {op['channels'][0]}->{op['channels'][1]} channels"
        text += f", {op['groups']} groups" if op["groups"] != 1 else ""
        text += f", stride {stride}" + (f", dilation {_size(op['dilation'])}" if set(op["dilation"]) != {1} else "")
        text += f", output {_size(op['output'])}"
        return text + (f", padding {tuple(op['padding'])} (top, bottom, left, right)" if with_padding else "")
    if kind == "matmul":
        return f"matmul {_num(op['rows'])}x{op['inner']} by {op['inner']}x{op['cols']} per sample"
    if kind == "activation":
        name: str = op["kind"]
        return name + (f" ({op['parameter']})" if op.get("parameter") is not None else "")
    if kind == "pool":
        text = (f"{op['kind']} pool {_size(op['window'])}, stride {_size(op['stride'])}, output {_size(op['output'])}, "
                f"padding {tuple(op['padding'])}")
        return text + (f", padding {'counted' if op['count_padding'] else 'not counted'} in the average"
                       if op.get("count_padding") is not None else "")
    if kind == "reduce":
        return f"{op['kind']} over {','.join(op['axes'])}"
    if kind == "norm":
        return f"normalisation with statistics over {','.join(op['axes'])}"
    if kind == "dropout":
        shared = f", one mask value shared over {','.join(op['shared_over'])}" if op["shared_over"] else ", per element"
        return f"dropout rate {op['rate']:g}{shared}"
    if kind == "add":
        return "residual add"
    if kind == "pad":
        return (f"{op['mode']} pad {tuple(op['padding'])}"
                + (f" with {op['value']:g}" if op["mode"] == "constant" else ""))
    return kind


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _arith_key(op: dict[str, Any]) -> tuple[Any, ...]:
    if op["op"] == "conv":
        return ("conv", tuple(op["kernel"]), tuple(op["channels"]), op["groups"], tuple(op["stride"]),
                tuple(op["dilation"]), tuple(op["output"]), tuple(op["grads"]))
    return ("matmul", op["rows"], op["inner"], op["cols"], tuple(op["grads"]))


def _grads(op: dict[str, Any]) -> str:
    return {(): "no gradient", ("input",): "input gradient only", ("weight",): "weight gradient only",
            ("input", "weight"): "input and weight gradients"}.get(tuple(op["grads"]), "+".join(op["grads"]))


def first_arithmetic_difference(a: list[dict[str, Any]], b: list[dict[str, Any]], la: str, lb: str) -> str | None:
    """Where two canonical op lists stop computing the same products, in one sentence; None if nowhere."""
    xa = [o for o in a if o["op"] in ARITHMETIC]
    xb = [o for o in b if o["op"] in ARITHMETIC]
    for i, (p, q) in enumerate(zip(xa, xb)):
        if _arith_key(p) != _arith_key(q):
            same_shape = _arith_key({**p, "grads": []}) == _arith_key({**q, "grads": []})
            what = (f"{la} {describe(p, False)} with {_grads(p)}, {lb} with {_grads(q)}" if same_shape
                    else f"{la} {describe(p, False)}, {lb} {describe(q, False)}")
            return f"product {i + 1} of {max(len(xa), len(xb))}: {what}"
    if len(xa) != len(xb):
        longer, name = (xa, la) if len(xa) > len(xb) else (xb, lb)
        return (f"{la} has {len(xa)} convolutions and matrix products, {lb} {len(xb)}; the first extra one "
                f"({name}) is {describe(longer[min(len(xa), len(xb))], False)}")
    return None


def structure(ops: list[dict[str, Any]]) -> list[list[str]]:
    """The layers without parameters between the products: segment i lists, in order, what follows
    product i (segment 0: what comes before the first). A convolution contributes its padding; runs of
    activations and dropout are sorted, since they commute."""
    segments: list[list[str]] = [[]]
    run: list[str] = []
    for op in ops:
        if op["op"] in ELEMENTWISE:
            run.append(describe(op))
            continue
        segments[-1] += sorted(run)
        run.clear()
        if op["op"] in ARITHMETIC:
            segments.append([f"padding {tuple(op['padding'])} (top, bottom, left, right)"]
                            if op["op"] == "conv" else [])
        else:
            segments[-1].append(describe(op))
    segments[-1] += sorted(run)
    return segments


def first_structure_difference(a: list[dict[str, Any]], b: list[dict[str, Any]], la: str, lb: str) -> str | None:
    """Where the layers without parameters first differ, both sides of that place in words; None if nowhere."""
    sa, sb = structure(a), structure(b)
    for i in range(min(len(sa), len(sb))):
        if sa[i] != sb[i]:
            place = f"after product {i}" if i else "before the first product"
            return f"{place}: {la} has {'; '.join(sa[i]) or 'nothing'}, {lb} has {'; '.join(sb[i]) or 'nothing'}"
    return None

"""One forward pass of a Keras model as the canonical ops of reprokit/kits/framework_free/arithmetic.py.

The model's call is traced into a tf.Graph with static shapes (nothing runs) and the graph's ops
are read in creation order, which is the order the layers ran in. ``Conv2D(activation="relu")``
and ``Conv2D`` + ``ReLU`` both give a ``Relu`` op; a ``ZeroPadding2D`` before a 'valid' conv is a
``Pad`` op folded into that conv. An operand "depends on a trainable parameter" when a trainable
variable's read reaches it through floating-point edges.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from reprokit.kits.framework_free import arithmetic  # noqa: E402

LAYOUT = "channels_last"
_VIEWS = {"Reshape", "Transpose", "Identity", "Squeeze", "ExpandDims", "Cast"}
_ACTIVATIONS = {"Relu": "relu", "Relu6": "relu6", "LeakyRelu": "leaky_relu", "Elu": "elu", "Softmax": "softmax",
                "LogSoftmax": "log_softmax"}


@dataclass
class Trace:
    ops: list[dict] = field(default_factory=list)
    rows: dict[int, list[int]] = field(default_factory=dict)   # id(Dense kernel variable) -> canonical input rows


def _handle(variable):
    return getattr(variable, "value", variable).handle


def _shape(t: tf.Tensor) -> list[int]:
    return [int(d) for d in t.shape.as_list()]


def _const(t: tf.Tensor):
    return tf.get_static_value(t)


def _names(rank: int) -> list[str]:
    return arithmetic.axis_names(rank, LAYOUT)


class _Reader:
    def __init__(self, graph: tf.Graph, model, batch: int) -> None:
        self.graph, self.batch = graph, batch
        by_handle = {id(_handle(v)): v for v in model.weights}
        self.variable_of: dict[str, object] = {}       # placeholder op name -> variable
        for external, internal in graph.captures:
            if id(external) in by_handle:
                self.variable_of[internal.op.name] = by_handle[id(external)]
        trainable = {id(v) for v in model.trainable_weights}
        self.trains: dict[str, bool] = {}               # op name -> its output depends on a trainable variable
        for op in graph.get_operations():
            if op.type == "ReadVariableOp":
                var = self.variable_of.get(op.inputs[0].op.name)
                self.trains[op.name] = var is not None and id(var) in trainable
            elif op.type == "StopGradient":
                self.trains[op.name] = False
            else:
                self.trains[op.name] = any(self.trains.get(t.op.name, False) for t in op.inputs if t.dtype.is_floating)
        self.trace = Trace()
        self.pads: dict[str, dict] = {}                 # Pad op name -> its record

    def _record(self, op: dict) -> dict:
        self.trace.ops.append(op)
        return op

    def _grads(self, x: tf.Tensor, w: tf.Tensor) -> list[str]:
        return [g for g, t in (("input", x), ("weight", w)) if self.trains.get(t.op.name, False)]

    def read(self) -> Trace:
        for op in self.graph.get_operations():
            handler = getattr(self, "_" + op.type, None)
            if handler:
                handler(op)
            elif op.type in _ACTIVATIONS:
                self._activation(op)
        self.trace.ops = [o for o in self.trace.ops if not o.pop("folded", False)]
        return self.trace

    # -- products --------------------------------------------------------------------------------
    def _Conv2D(self, op, groups: int | None = None) -> None:
        x, w, y = op.inputs[0], op.inputs[1], op.outputs[0]
        if op.get_attr("data_format") != b"NHWC":
            return
        kh, kw, cin_g, cout = _shape(w)
        stride = [int(s) for s in op.get_attr("strides")[1:3]]
        dilation = [int(d) for d in op.get_attr("dilations")[1:3]]
        size_in = _shape(x)[1:3]
        padding = op.get_attr("padding")
        if padding == b"SAME":
            start = [arithmetic.same_padding_start(size_in[i], k, stride[i], dilation[i])
                     for i, k in enumerate((kh, kw))]
        elif padding == b"EXPLICIT":
            explicit = op.get_attr("explicit_paddings")
            start = [int(explicit[2]), int(explicit[4])]
        else:
            start = [0, 0]
        pad = self.pads.get(x.op.name)
        if pad is not None and pad["mode"] == "constant" and pad["value"] == 0:
            pad["folded"] = True
            start = [start[0] + pad["padding"][0], start[1] + pad["padding"][2]]
            size_in = [size_in[0] - pad["padding"][0] - pad["padding"][1],
                       size_in[1] - pad["padding"][2] - pad["padding"][3]]
            x = pad["input"]
        cin = _shape(op.inputs[0])[3]
        if groups is None:
            groups = cin // cin_g
        else:
            cout = cin * cout          # depthwise: the filter's last axis is the channel multiplier
        self._record(arithmetic.conv([kh, kw], cin, cout, groups, stride, dilation, size_in, _shape(y)[1:3], start,
                                     self.batch, self._grads(x, w)))

    def _DepthwiseConv2dNative(self, op) -> None:
        self._Conv2D(op, groups=_shape(op.inputs[0])[3])

    def _MatMul(self, op) -> None:
        a, b = op.inputs[0], op.inputs[1]
        m, k = _shape(a)[::-1] if op.get_attr("transpose_a") else _shape(a)
        n = _shape(b)[0] if op.get_attr("transpose_b") else _shape(b)[1]
        self._record(arithmetic.matmul(m, k, n, self.batch, self._grads(a, b)))
        variable = self._variable(b)
        if variable is not None and not op.get_attr("transpose_a") and not op.get_attr("transpose_b"):
            root, chain = self._chain(a)
            self.trace.rows[id(variable)] = arithmetic.canonical_rows(root, chain, LAYOUT)

    def _BatchMatMulV2(self, op) -> None:
        a, b, y = op.inputs[0], op.inputs[1], op.outputs[0]
        k = _shape(a)[-2] if op.get_attr("adj_x") else _shape(a)[-1]
        rows = math.prod(_shape(y)[:-1])
        self._record(arithmetic.matmul(rows, k, _shape(y)[-1], self.batch, self._grads(a, b)))

    _BatchMatMulV3 = _BatchMatMulV2

    def _variable(self, t: tf.Tensor):
        while t.op.type in ("Identity", "Cast"):
            t = t.op.inputs[0]
        if t.op.type == "ReadVariableOp":
            return self.variable_of.get(t.op.inputs[0].op.name)
        return None

    def _chain(self, t: tf.Tensor) -> tuple[list[int], list]:
        """The feature map a tensor is a reshape/transpose of, and the steps from it to the tensor."""
        steps = []
        while t.op.type in _VIEWS:
            if t.op.type == "Transpose":
                perm = _const(t.op.inputs[1])
                if perm is None:
                    return _shape(t), []
                steps.append(("transpose", [int(p) for p in perm]))
            else:
                steps.append(("reshape", _shape(t)))
            t = t.op.inputs[0]
        return _shape(t), steps[::-1]

    # -- layers without parameters ---------------------------------------------------------------
    def _AddV2(self, op) -> None:
        """Two feature maps of one shape added: a residual connection (a bias or BatchNorm's offset is a
        variable or a broadcast of one, never a whole map)."""
        a, b = op.inputs[0], op.inputs[1]
        if len(_shape(a)) == 4 and _shape(a) == _shape(b) and self._variable(a) is None and self._variable(b) is None:
            self._record(arithmetic.residual_add())

    def _Pad(self, op, mode: str = "constant") -> None:
        x, amounts = op.inputs[0], _const(op.inputs[1])
        if amounts is None or len(_shape(x)) != 4 or any(amounts[0]) or any(amounts[3]):
            return
        value = 0.0
        if op.type == "PadV2":
            value = float(_const(op.inputs[2]))
        (top, bottom), (left, right) = amounts[1], amounts[2]
        self.pads[op.name] = self._record({"op": "pad", "mode": mode, "padding": [int(top), int(bottom), int(left),
                                                                                 int(right)], "value": value})
        self.pads[op.name]["input"] = x

    _PadV2 = _Pad

    def _MirrorPad(self, op) -> None:
        self._Pad(op, "reflect" if op.get_attr("mode") == b"REFLECT" else "symmetric")

    def _pool(self, op, kind: str) -> None:
        if op.get_attr("data_format") != b"NHWC":
            return
        x, y = op.inputs[0], op.outputs[0]
        window = [int(k) for k in op.get_attr("ksize")[1:3]]
        stride = [int(s) for s in op.get_attr("strides")[1:3]]
        size_in = _shape(x)[1:3]
        same = op.get_attr("padding") == b"SAME"
        start = [arithmetic.same_padding_start(size_in[i], k, stride[i], 1) if same else 0
                 for i, k in enumerate(window)]
        pad = self.pads.get(x.op.name)
        if kind == "max" and not same and pad is not None and pad["value"] == float("-inf"):
            # a -inf pad before a 'valid' max pool is the pool's own padding (torch's MaxPool2d padding)
            pad["folded"] = True
            top, bottom, left, right = pad["padding"]
            start, size_in = [top, left], [size_in[0] - top - bottom, size_in[1] - left - right]
        self._record(arithmetic.pool(kind, window, stride, size_in, _shape(y)[1:3], start,
                                     False if kind == "avg" else None))

    def _MaxPool(self, op) -> None:
        self._pool(op, "max")

    def _AvgPool(self, op) -> None:
        self._pool(op, "avg")

    def _Mean(self, op) -> None:
        x = op.inputs[0]
        if x.op.type == "SquaredDifference":          # the variance of a normalisation's moments
            return
        axes = _const(op.inputs[1])
        if axes is None:
            return
        rank = len(_shape(x))
        names = arithmetic.ordered(_names(rank)[int(a) % rank] for a in tf.nest.flatten(axes.tolist()))
        moments = any(c.type == "StopGradient" for c in op.outputs[0].consumers())
        self._record({"op": "norm", "axes": names} if moments else {"op": "reduce", "kind": "mean", "axes": names})

    def _Max(self, op) -> None:
        axes = _const(op.inputs[1])
        if axes is None:
            return
        rank = len(_shape(op.inputs[0]))
        names = arithmetic.ordered(_names(rank)[int(a) % rank] for a in tf.nest.flatten(axes.tolist()))
        self._record({"op": "reduce", "kind": "max", "axes": names})

    def _SelectV2(self, op) -> None:
        """Keras's dropout: where(uniform >= rate, x * 1/(1 - rate), 0)."""
        mask = op.inputs[0]
        if mask.op.type != "GreaterEqual" or not _random(mask.op.inputs[0]):
            return
        rate = _const(mask.op.inputs[1])
        if rate is not None and float(rate) > 0:
            y = op.outputs[0]
            self._record(arithmetic.dropout(float(rate), _shape(mask), _shape(y), _names(len(_shape(y)))))

    def _activation(self, op) -> None:
        kind = _ACTIVATIONS[op.type]
        if kind in ("softmax", "log_softmax"):
            parameter = _names(len(_shape(op.inputs[0])))[-1]
        elif kind == "leaky_relu":
            parameter = round(float(op.get_attr("alpha")), 6)
        elif kind == "elu":
            parameter = 1.0
        else:
            parameter = None
        self._record(arithmetic.activation(kind, parameter))


def _random(t: tf.Tensor, depth: int = 4) -> bool:
    """Does this tensor come from a random-uniform op within a few elementwise steps?"""
    for _ in range(depth):
        if "RandomUniform" in t.op.type:
            return True
        if not t.op.inputs:
            return False
        t = t.op.inputs[0]
    return "RandomUniform" in t.op.type


def trace(model, shape: tuple[int, ...], dtype, training: bool) -> Trace:
    """The canonical ops of model(x) for an input of this static shape (NHWC); nothing is run."""
    fn = tf.function(lambda x: model(x, training=training)).get_concrete_function(tf.TensorSpec(shape, dtype))
    reader = _Reader(fn.graph, model, int(shape[0]))
    out = reader.read()
    for op in out.ops:
        op.pop("input", None)
    return out


def training_flops(model, input_size: int) -> dict:
    """Training FLOPs per sample of the model at this input size, read from its traced graph."""
    ops = trace(model, (2, input_size, input_size, 3), tf.float32, training=False).ops
    return {**arithmetic.flops(ops), "how": "TensorFlow: the ops of the model's traced tf.Graph; " + arithmetic.HOW}

"""One forward pass of a PyTorch model as the canonical ops of reprokit/kits/framework_free/arithmetic.py.

A TorchDispatchMode sees every aten op below autograd, whether a layer is a module or a
function call: ``nn.ReLU()`` and ``F.relu`` are both ``aten.relu``, ``nn.Linear`` is ``aten.t``
and ``aten.addmm`` (or ``aten.mm`` and an add without its bias). An operand "depends on a
trainable parameter" when autograd tracks it (``requires_grad``). Reshapes and transposes between a
feature map and a matrix product are followed, so a dense layer's input order is known however the
model flattens.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from reprokit.kits.framework_free import arithmetic

aten = torch.ops.aten
LAYOUT = "channels_first"
_TRANSPOSES = {aten.permute.default, aten.transpose.int, aten.t.default}
_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.flatten.using_ints,
          aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default, aten.clone.default,
          aten._to_copy.default, aten.alias.default, aten.contiguous.default} | _TRANSPOSES
_MATMULS = {aten.mm.default: 0, aten.addmm.default: 1, aten.bmm.default: 0, aten.baddbmm.default: 1}
_BATCH_NORMS = {aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
                aten._native_batch_norm_legit_no_training.default, aten.cudnn_batch_norm.default}


@dataclass
class Trace:
    ops: list[dict] = field(default_factory=list)
    rows: dict[int, list[int]] = field(default_factory=dict)   # id(Linear weight) -> canonical input rows
    bias_of: dict[int, int] = field(default_factory=dict)      # id(bias added after a product) -> id(its weight)


def _names(rank: int) -> list[str]:
    return arithmetic.axis_names(rank, LAYOUT)


def _axes(dims, rank: int) -> list[str]:
    names = _names(rank)
    return [names[d % rank] for d in dims]


def _pair(v, n: int = 2) -> list[int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return [int(x) for x in (v * n if len(v) == 1 else v)]


def _positional(func, args: tuple, kwargs: dict) -> tuple:
    """All of an op's arguments in schema order, defaults filled in."""
    out = list(args)
    for arg in func._schema.arguments[len(args):]:
        if arg.kwarg_only and arg.name not in kwargs:
            continue
        out.append(kwargs[arg.name] if arg.name in kwargs else arg.default_value if arg.has_default_value() else None)
    return tuple(out)


class _Recorder(TorchDispatchMode):
    def __init__(self, batch: int, weights: set[int]) -> None:
        super().__init__()
        self.batch = batch
        self.weights = weights
        self.trace = Trace()
        self.views: dict[int, tuple[tuple[int, ...], list]] = {}   # id(tensor) -> (feature map shape, view chain)
        self.weight_of: dict[int, int] = {}                          # id(view of a parameter) -> id(parameter)
        self.product_of: dict[int, int] = {}                         # id(product output) -> id(its weight)
        self.pads: dict[int, dict] = {}                              # id(padded tensor) -> its pad record
        self.noise: dict[int, float] = {}                            # id(dropout mask) -> keep probability
        self.keep: list = []                                         # so that no id above is reused

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        handler = self._handler(func)
        if handler:
            handler(func, _positional(func, args, kwargs), out)
        return out

    def _handler(self, func):
        if func in _VIEWS:
            return self._view
        if func in _MATMULS:
            return self._matmul
        if func in _BATCH_NORMS:
            return self._norm
        return {aten.convolution.default: self._conv, aten.constant_pad_nd.default: self._pad,
                aten.reflection_pad2d.default: self._pad, aten.replication_pad2d.default: self._pad,
                aten.max_pool2d_with_indices.default: self._pool, aten.max_pool2d.default: self._pool,
                aten.avg_pool2d.default: self._pool, aten.mean.dim: self._reduce, aten.amax.default: self._reduce,
                aten.native_layer_norm.default: self._layer_norm, aten.native_dropout.default: self._native_dropout,
                aten.bernoulli_.float: self._bernoulli, aten.mul.Tensor: self._mul, aten.add.Tensor: self._add,
                aten.add_.Tensor: self._add}.get(func) or self._activation(func)

    def _record(self, op: dict) -> dict:
        self.trace.ops.append(op)
        return op

    # -- reshapes between a feature map and a dense layer ------------------------------------------
    def _view(self, func, args, out) -> None:
        x = args[0]
        if not isinstance(out, torch.Tensor) or not isinstance(x, torch.Tensor):
            return
        if id(x) in self.weights or id(x) in self.weight_of:
            self.weight_of[id(out)] = self.weight_of.get(id(x), id(x))
        root, chain = self.views.get(id(x), (tuple(x.shape), []))
        if func is aten.permute.default:
            step = ("transpose", [d % x.dim() for d in args[1]])
        elif func is aten.transpose.int:
            perm = list(range(x.dim()))
            a, b = args[1] % x.dim(), args[2] % x.dim()
            perm[a], perm[b] = perm[b], perm[a]
            step = ("transpose", perm)
        elif func is aten.t.default:
            step = ("transpose", list(range(x.dim()))[::-1])
        else:
            step = ("reshape", list(out.shape))
        self.views[id(out)] = (root, [*chain, step])
        self.keep.append(out)

    # -- products --------------------------------------------------------------------------------
    def _conv(self, func, args, out) -> None:
        x, w, _, stride, padding, dilation, transposed, _, groups = args[:9]
        if transposed:
            return
        n_sp = x.dim() - 2
        start = _pair(padding, n_sp)
        size_in = list(x.shape[2:])
        pad = self.pads.get(id(x))
        if pad is not None and pad["mode"] == "constant" and pad["value"] == 0 and len(pad["padding"]) == 2 * n_sp:
            pad["folded"] = True
            start = [s + pad["padding"][2 * i] for i, s in enumerate(start)]
            size_in = [s - pad["padding"][2 * i] - pad["padding"][2 * i + 1] for i, s in enumerate(size_in)]
        grads = [g for g, t in (("input", x), ("weight", w)) if t.requires_grad]
        self.product_of[id(out)] = id(w)
        self.keep.append(out)
        self._record(arithmetic.conv(list(w.shape[2:]), int(w.shape[1]) * groups, int(w.shape[0]), int(groups),
                                     _pair(stride, n_sp), _pair(dilation, n_sp), size_in, list(out.shape[2:]), start,
                                     self.batch, grads))

    def _matmul(self, func, args, out) -> None:
        a, b = args[_MATMULS[func]], args[_MATMULS[func] + 1]
        rows = a.shape[0] * a.shape[1] if a.dim() == 3 else a.shape[0]
        grads = [g for g, t in (("input", a), ("weight", b)) if t.requires_grad]
        self._record(arithmetic.matmul(int(rows), int(a.shape[-1]), int(b.shape[-1]), self.batch, grads))
        weight = self.weight_of.get(id(b))
        if weight is not None:
            self.product_of[id(out)] = weight
            self.keep.append(out)
        if weight is not None and id(a) in self.views:
            root, chain = self.views[id(a)]
            self.trace.rows[weight] = arithmetic.canonical_rows(root, chain, LAYOUT)

    # -- layers without parameters ---------------------------------------------------------------
    def _pad(self, func, args, out) -> None:
        x, amounts = args[0], list(args[1])
        if x.dim() != 4 or len(amounts) != 4:
            return
        left, right, top, bottom = amounts
        mode = {aten.constant_pad_nd.default: "constant", aten.reflection_pad2d.default: "reflect",
                aten.replication_pad2d.default: "replicate"}[func]
        value = float(args[2]) if mode == "constant" and len(args) > 2 else 0.0
        self.pads[id(out)] = self._record({"op": "pad", "mode": mode, "padding": [top, bottom, left, right],
                                           "value": value})
        self.keep.append(out)

    def _pool(self, func, args, out) -> None:
        x = args[0]
        y = out[0] if isinstance(out, tuple) else out
        window = _pair(args[1])
        stride = _pair(args[2]) if len(args) > 2 and args[2] else window
        start = _pair(args[3]) if len(args) > 3 else [0, 0]
        if func is aten.avg_pool2d.default:
            include = bool(args[5]) if len(args) > 5 else True
            self._record(arithmetic.pool("avg", window, stride, list(x.shape[2:]), list(y.shape[2:]), start, include))
        else:
            if len(args) > 4 and _pair(args[4]) != [1, 1]:
                return
            self._record(arithmetic.pool("max", window, stride, list(x.shape[2:]), list(y.shape[2:]), start))

    def _reduce(self, func, args, out) -> None:
        x = args[0]
        dims = args[1] if len(args) > 1 else list(range(x.dim()))
        kind = "mean" if func is aten.mean.dim else "max"
        self._record({"op": "reduce", "kind": kind, "axes": arithmetic.ordered(_axes(dims, x.dim()))})

    def _norm(self, func, args, out) -> None:
        x = args[0]
        if len(args) < 6 or not args[5]:          # evaluation mode: running statistics, none taken here
            return
        self._record({"op": "norm", "axes": arithmetic.ordered(_axes([d for d in range(x.dim()) if d != 1], x.dim()))})

    def _layer_norm(self, func, args, out) -> None:
        x, shape = args[0], args[1]
        self._record({"op": "norm", "axes": arithmetic.ordered(_axes(range(x.dim() - len(shape), x.dim()), x.dim()))})

    def _native_dropout(self, func, args, out) -> None:
        x, p = args[0], float(args[1])
        train = args[2]
        if (train is None or train) and p > 0:          # train None: training
            self._record(arithmetic.dropout(p, x.shape, x.shape, _names(x.dim())))

    def _bernoulli(self, func, args, out) -> None:
        self.noise[id(args[0])] = float(args[1])
        self.keep.append(args[0])

    def _add(self, func, args, out) -> None:
        """Two feature maps of one shape added: a residual connection. A parameter added to a product's
        output: that product's bias, held outside its layer."""
        a, b = args[0], args[1]
        if (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == 4 and a.shape == b.shape
                and not {id(a), id(b)} & (self.weights | set(self.weight_of))):
            self._record(arithmetic.residual_add())
            return
        for x, b in ((args[0], args[1]), (args[1], args[0])):
            if isinstance(x, torch.Tensor) and isinstance(b, torch.Tensor) and id(x) in self.product_of:
                bias = id(b) if id(b) in self.weights else self.weight_of.get(id(b))
                if bias is not None:
                    self.trace.bias_of[bias] = self.product_of[id(x)]

    def _mul(self, func, args, out) -> None:
        for x, mask in ((args[0], args[1]), (args[1], args[0])):
            if isinstance(mask, torch.Tensor) and id(mask) in self.noise and isinstance(x, torch.Tensor):
                rate = 1.0 - self.noise.pop(id(mask))
                if rate > 0:
                    self._record(arithmetic.dropout(rate, mask.shape, x.shape, _names(x.dim())))
                return

    def _activation(self, func):
        kinds = {aten.relu.default: "relu", aten.relu_.default: "relu", aten.leaky_relu.default: "leaky_relu",
                 aten.leaky_relu_.default: "leaky_relu", aten.elu.default: "elu", aten.elu_.default: "elu",
                 aten.hardtanh.default: "hardtanh", aten.hardtanh_.default: "hardtanh",
                 aten._softmax.default: "softmax", aten._log_softmax.default: "log_softmax"}
        kind = kinds.get(func)
        if kind is None:
            return None

        def record(func, args, out) -> None:
            x = args[0]
            if kind == "hardtanh":
                if (float(args[1]), float(args[2])) == (0.0, 6.0):
                    self._record(arithmetic.activation("relu6"))
            elif kind in ("softmax", "log_softmax"):
                self._record(arithmetic.activation(kind, _axes([args[1]], x.dim())[0]))
            elif kind == "leaky_relu":
                self._record(arithmetic.activation(kind, round(float(args[1]) if len(args) > 1 else 0.01, 6)))
            elif kind == "elu":
                self._record(arithmetic.activation(kind, round(float(args[1]) if len(args) > 1 else 1.0, 6)))
            else:
                self._record(arithmetic.activation(kind))
        return record


def trace(model: torch.nn.Module, x: torch.Tensor, training: bool | None) -> Trace:
    """The canonical ops of model(x) in training or evaluation mode (None: the modes its modules are in);
    the model's state (modes, BatchNorm running statistics) is as before afterwards."""
    modes = {m: m.training for m in model.modules()}
    state = {k: v.detach().clone() for k, v in model.state_dict().items()} if training is not False else None
    recorder = _Recorder(int(x.shape[0]), {id(p) for p in model.parameters()})
    try:
        if training is not None:
            model.train(training)
        with torch.enable_grad(), recorder:
            model(x)
    finally:
        for m, mode in modes.items():
            m.training = mode
        if state is not None:
            with torch.no_grad():
                for k, v in model.state_dict().items():
                    v.copy_(state[k])
    recorder.trace.ops = [o for o in recorder.trace.ops if not o.pop("folded", False)]
    return recorder.trace


def training_flops(model: torch.nn.Module, input_size: int, device, dtype=torch.float32) -> dict:
    """Training FLOPs per sample of the model at this input size (a forward pass in evaluation mode on
    zeros: no running statistics change and no random numbers are drawn)."""
    ops = trace(model, torch.zeros(2, 3, input_size, input_size, device=device, dtype=dtype), training=False).ops
    return {**arithmetic.flops(ops), "how": "PyTorch: aten ops of one forward pass under a TorchDispatchMode; "
            + arithmetic.HOW}

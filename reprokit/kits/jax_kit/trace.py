"""One forward pass of a Flax NNX model as the canonical ops of reprokit/kits/framework_free/arithmetic.py.

``jax.make_jaxpr`` traces the model as a pure function of its parameters, its other state and the
input; the equations are walked in order, into the sub-jaxprs of ``jit``, ``custom_jvp_call`` and
``custom_vjp_call``. An operand "depends on a trainable parameter" when the jaxpr's data flow leads
to it from an ``nnx.Param`` input. Products are ``conv_general_dilated`` and ``dot_general``; the
layers without parameters are read from the primitives JAX lowers them to: ``relu``/``relu6``/
``leaky_relu``/``elu``/``log_softmax`` (named sub-jaxprs of jax.nn), a bare ``max(x, 0)`` on a batch,
softmax (``reduce_max`` then ``max(-inf, .)``), ``reduce_window_max``/``_sum`` pools, ``reduce_sum``
means and ``reduce_max`` (global pooling), a statistic taken as a sum of x and of x squared over the
same axes (BatchNorm, LayerNorm), dropout (a ``select_n`` on a Bernoulli mask, its shape before
broadcasting) and ``pad``. The model's layout is NHWC (the kit's); a convolution's comes from its
dimension numbers.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.extend import core as jcore

from reprokit.kits.framework_free import arithmetic

LAYOUT = "channels_last"
_NAMED_ACTIVATIONS = {"relu": "relu", "relu6": "relu6", "leaky_relu": "leaky_relu", "elu": "elu",
                      "log_softmax": "log_softmax", "softmax": "softmax", "_softmax": "softmax"}
_SUBJAXPRS = ("jaxpr", "call_jaxpr", "fun_jaxpr")
_VIEWS = ("reshape", "squeeze", "expand_dims", "convert_element_type", "copy", "copy_p")


@dataclass
class Trace:
    ops: list[dict] = field(default_factory=list)
    rows: dict[str, list[int] | None] = field(default_factory=dict)   # dense kernel path -> canonical input rows
    uses: list[str] = field(default_factory=list)                     # parameter paths in order of first use


def path_name(path: Sequence[Any]) -> str:
    """A pytree key path as "0/kernel" (the Variable's own value key left out)."""
    keys = []
    for k in path:
        key = getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))
        keys.append(str(key))
    while keys and keys[-1] in ("value", "raw_value"):
        keys.pop()
    return "/".join(keys)


def _names(rank: int) -> list[str]:
    return arithmetic.axis_names(rank, LAYOUT)


def _literal(v: Any) -> float | None:
    return float(v.val) if isinstance(v, jcore.Literal) and getattr(v.val, "ndim", 0) == 0 else None


class _Walker:
    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.trace = Trace()
        self.depends: set[Any] = set()          # vars that depend on a trainable parameter
        self.param_of: dict[Any, str] = {}      # var -> the parameter it is (a view of)
        self.views: dict[Any, tuple[tuple[int, ...], list]] = {}   # var -> (feature map shape, view chain)
        self.pads: dict[Any, dict] = {}         # var -> the pad record that made it
        self.masks: dict[Any, tuple[float, list[int]]] = {}        # Bernoulli mask -> (keep probability, shape)
        self.scaled: dict[Any, float] = {}      # var -> the constant it was divided by

    # -- the walk ---------------------------------------------------------------------------------
    def walk(self, jaxpr: Any) -> None:
        users: dict[Any, list[Any]] = {}
        for eqn in jaxpr.eqns:
            for v in eqn.invars:
                if isinstance(v, jcore.Var):
                    users.setdefault(v, []).append(eqn)
        self.users = users
        self.producer = {v: eqn for eqn in jaxpr.eqns for v in eqn.outvars}
        for eqn in jaxpr.eqns:
            self._uses(eqn)
            if any(v in self.depends for v in eqn.invars if isinstance(v, jcore.Var)):
                self.depends.update(eqn.outvars)
            self._equation(eqn)

    def _uses(self, eqn: Any) -> None:
        for v in eqn.invars:
            name = self.param_of.get(v) if isinstance(v, jcore.Var) else None
            if name is not None and name not in self.trace.uses and eqn.primitive.name not in _VIEWS:
                self.trace.uses.append(name)

    def _inner(self, eqn: Any) -> Any:
        for key in _SUBJAXPRS:
            sub = eqn.params.get(key)
            if sub is not None:
                return getattr(sub, "jaxpr", sub)
        return None

    def _equation(self, eqn: Any) -> None:
        name = eqn.primitive.name
        inner = self._inner(eqn)
        if inner is not None:
            kind = _NAMED_ACTIVATIONS.get(str(eqn.params.get("name", "")))
            if kind is not None:
                self._named_activation(kind, eqn, inner)
            elif eqn.params.get("name") == "_bernoulli":
                self._bernoulli(eqn)
            else:
                self._call(eqn, inner)
            return
        handler = _HANDLERS.get(name)
        if handler is not None:
            handler(self, eqn)

    def _call(self, eqn: Any, inner: Any) -> None:
        """A sub-jaxpr: its inputs stand for the caller's, its outputs are the caller's."""
        outer_users, outer_producer = self.users, self.producer
        for outer, v in zip(eqn.invars, inner.invars):
            if not isinstance(outer, jcore.Var):
                continue
            for table in (self.param_of, self.views, self.pads, self.masks, self.scaled):
                if outer in table:
                    table[v] = table[outer]
            if outer in self.depends:
                self.depends.add(v)
        self.walk(inner)
        self.users, self.producer = outer_users, outer_producer
        for outer, v in zip(eqn.outvars, inner.outvars):
            if not isinstance(v, jcore.Var):
                continue
            for table in (self.views, self.pads, self.masks, self.scaled):
                if v in table:
                    table[outer] = table[v]
            if v in self.depends:
                self.depends.add(outer)

    def _record(self, op: dict) -> dict:
        self.trace.ops.append(op)
        return op

    # -- views between a feature map and a dense layer ------------------------------------------
    def _view(self, eqn: Any, step: tuple[str, list[int]] | None) -> None:
        x, out = eqn.invars[0], eqn.outvars[0]
        if not isinstance(x, jcore.Var):
            return
        if x in self.param_of:
            self.param_of[out] = self.param_of[x]
        root, chain = self.views.get(x, (tuple(x.aval.shape), []))
        self.views[out] = (root, [*chain, step] if step else chain)
        if x in self.masks:
            self.masks[out] = self.masks[x]

    def _reshape(self, eqn: Any) -> None:
        self._view(eqn, ("reshape", list(eqn.outvars[0].aval.shape)))

    def _cast(self, eqn: Any) -> None:
        self._view(eqn, None)

    def _transpose(self, eqn: Any) -> None:
        self._view(eqn, ("transpose", [int(d) for d in eqn.params["permutation"]]))

    # -- products -------------------------------------------------------------------------------
    def _conv_general_dilated(self, eqn: Any) -> None:
        p = eqn.params
        if set(p["lhs_dilation"]) != {1} or p["batch_group_count"] != 1:
            return                    # a transposed convolution, or a gradient's: no canonical form here
        x, w = eqn.invars
        lhs, rhs, out = p["dimension_numbers"]
        xs, ws, ys = x.aval.shape, w.aval.shape, eqn.outvars[0].aval.shape
        size_in = [int(xs[d]) for d in lhs[2:]]
        start = [int(lo) for lo, _ in p["padding"]]
        pad = self.pads.get(x)
        foldable = pad is not None and pad["mode"] == "constant" and pad["value"] == 0
        if pad is not None and foldable and len(pad["padding"]) == 2 * len(start):
            pad["folded"] = True
            start = [s + pad["padding"][2 * i] for i, s in enumerate(start)]
            size_in = [s - pad["padding"][2 * i] - pad["padding"][2 * i + 1] for i, s in enumerate(size_in)]
        grads = [g for g, t in (("input", x), ("weight", w)) if t in self.depends]
        groups = int(p["feature_group_count"])
        self._record(arithmetic.conv([int(ws[d]) for d in rhs[2:]], int(xs[lhs[1]]), int(ws[rhs[0]]), groups,
                                     [int(s) for s in p["window_strides"]], [int(d) for d in p["rhs_dilation"]],
                                     size_in, [int(ys[d]) for d in out[2:]], start, self.batch, grads))

    def _dot_general(self, eqn: Any) -> None:
        a, b = eqn.invars
        (ca, cb), (ba, bb) = eqn.params["dimension_numbers"]
        sa, sb = a.aval.shape, b.aval.shape
        rows = math.prod(int(d) for i, d in enumerate(sa) if i not in ca)
        inner = math.prod(int(sa[i]) for i in ca)
        cols = math.prod(int(d) for i, d in enumerate(sb) if i not in cb and i not in bb)
        grads = [g for g, t in (("input", a), ("weight", b)) if isinstance(t, jcore.Var) and t in self.depends]
        self._record(arithmetic.matmul(rows, inner, cols, self.batch, grads))
        weight = self.param_of.get(b)
        if weight is not None and a in self.views and weight not in self.trace.rows:
            root, chain = self.views[a]
            self.trace.rows[weight] = arithmetic.canonical_rows(root, chain, LAYOUT)

    # -- layers without parameters ------------------------------------------------------------
    def _named_activation(self, kind: str, eqn: Any, inner: Any) -> None:
        x = eqn.invars[0]
        rank = len(x.aval.shape)
        parameter: float | str | None = None
        if kind == "leaky_relu":
            slope = _literal(eqn.invars[1]) if len(eqn.invars) > 1 else None
            parameter = round(slope if slope is not None else 0.01, 6)
        elif kind == "elu":
            alphas = [_literal(v) for e in inner.eqns if e.primitive.name == "mul" for v in e.invars]
            parameter = round(next((a for a in alphas if a is not None), 1.0), 6)
        elif kind in ("softmax", "log_softmax"):
            axis = eqn.params.get("axis", -1)
            parameter = _names(rank)[int(axis if isinstance(axis, int) else -1) % rank]
        self._record(arithmetic.activation(kind, parameter))

    def _max(self, eqn: Any) -> None:
        """``max(x, 0)`` on a batch of activations (not a statistic's clip to zero) is a ReLU."""
        values = [(_literal(v), v) for v in eqn.invars]
        zero = any(c == 0.0 for c, _ in values)
        batch = [v for c, v in values if c is None and len(v.aval.shape) >= 2 and v.aval.shape[0] == self.batch]
        if zero and batch:
            self._record(arithmetic.activation("relu"))

    def _add(self, eqn: Any) -> None:
        """Two feature maps of one shape added: a residual connection (a bias or BatchNorm's offset is a
        parameter broadcast to the map's shape, a constant a literal)."""
        a, b = eqn.invars
        if all(isinstance(v, jcore.Var) and len(v.aval.shape) == 4 and v.aval.shape[0] == self.batch
               and v not in self.param_of
               and not any(e.primitive.name == "broadcast_in_dim" for e in self._producers(v)) for v in (a, b)):
            self._record(arithmetic.residual_add())

    def _reduce_max(self, eqn: Any) -> None:
        x = eqn.invars[0]
        axes = arithmetic.ordered(_names(len(x.aval.shape))[a] for a in eqn.params["axes"])
        then = self.users.get(eqn.outvars[0], [])
        if any(e.primitive.name == "max" and any(_literal(v) == -math.inf for v in e.invars) for e in then):
            self._record(arithmetic.activation("softmax", axes[0] if len(axes) == 1 else ",".join(axes)))
        else:
            self._record({"op": "reduce", "kind": "max", "axes": axes})

    def _reduce_sum(self, eqn: Any) -> None:
        x, axes = eqn.invars[0], tuple(eqn.params["axes"])
        names = _names(len(x.aval.shape))
        if self._statistic_of(x, axes) is not None:
            return                                # a variance's sum of squares, recorded with its mean
        if any(self._summed(e.outvars[0], axes) for e in self._squares_of(x)):
            self._record({"op": "norm", "axes": arithmetic.ordered(names[a] for a in axes)})
            return
        if any(e.primitive.name == "exp" for e in self._producers(x)):
            return                                # a softmax's denominator
        self._record({"op": "reduce", "kind": "mean", "axes": arithmetic.ordered(names[a] for a in axes)})

    def _producers(self, x: Any) -> list[Any]:
        return [self.producer[x]] if x in self.producer else []

    def _summed(self, v: Any, axes: tuple) -> bool:
        return any(e.primitive.name == "reduce_sum" and tuple(e.params["axes"]) == axes for e in self.users.get(v, []))

    @staticmethod
    def _square(e: Any) -> bool:
        return e.primitive.name == "square" or (e.primitive.name == "integer_pow" and e.params.get("y") == 2)

    def _squares_of(self, x: Any) -> list[Any]:
        """The squares of x or of x minus something (a variance's one-pass and two-pass forms)."""
        centred = [e.outvars[0] for e in self.users.get(x, []) if e.primitive.name == "sub" and e.invars[0] is x]
        return [e for v in (x, *centred) for e in self.users.get(v, []) if self._square(e)]

    def _statistic_of(self, w: Any, axes: tuple) -> Any:
        """x where w = square(x) or square(x - m) and x is summed over the same axes too, else None."""
        for e in self._producers(w):
            if not self._square(e) or not isinstance(e.invars[0], jcore.Var):
                continue
            z = e.invars[0]
            candidates = [z, *(p.invars[0] for p in self._producers(z) if p.primitive.name == "sub")]
            for x in candidates:
                if isinstance(x, jcore.Var) and self._summed(x, axes):
                    return x
        return None

    def _window(self, eqn: Any, kind: str) -> None:
        x, y = eqn.invars[0], eqn.outvars[0]
        p = eqn.params
        dims = list(range(1, len(x.aval.shape) - 1))           # NHWC: the spatial axes
        count = None
        if kind == "avg":
            then = self.users.get(y, [])
            count = any(e.primitive.name == "div" and _literal(e.invars[1]) is not None for e in then)
        self._record(arithmetic.pool(kind, [int(p["window_dimensions"][d]) for d in dims],
                                     [int(p["window_strides"][d]) for d in dims],
                                     [int(x.aval.shape[d]) for d in dims], [int(y.aval.shape[d]) for d in dims],
                                     [int(p["padding"][d][0]) for d in dims], count))

    def _reduce_window_max(self, eqn: Any) -> None:
        self._window(eqn, "max")

    def _reduce_window_sum(self, eqn: Any) -> None:
        self._window(eqn, "avg")

    def _pad(self, eqn: Any) -> None:
        x, value = eqn.invars
        config = eqn.params["padding_config"]
        if len(x.aval.shape) != 4 or any(int(i) for _, _, i in config):
            return
        (top, bottom, _), (left, right, _) = config[1], config[2]
        fill = _literal(value)
        self.pads[eqn.outvars[0]] = self._record({"op": "pad", "mode": "constant",
                                                  "padding": [int(top), int(bottom), int(left), int(right)],
                                                  "value": fill if fill is not None else 0.0})

    def _bernoulli(self, eqn: Any) -> None:
        keep = _literal(eqn.invars[1]) if len(eqn.invars) > 1 else None
        self.masks[eqn.outvars[0]] = (keep if keep is not None else math.nan, list(eqn.outvars[0].aval.shape))

    def _broadcast_in_dim(self, eqn: Any) -> None:
        x = eqn.invars[0]
        if isinstance(x, jcore.Var) and x in self.masks:
            self.masks[eqn.outvars[0]] = self.masks[x]

    def _div(self, eqn: Any) -> None:
        c = _literal(eqn.invars[1])
        if c is not None:
            self.scaled[eqn.outvars[0]] = c

    def _select_n(self, eqn: Any) -> None:
        mask = eqn.invars[0]
        if not isinstance(mask, jcore.Var) or mask not in self.masks:
            return
        keep, shape = self.masks[mask]
        kept = eqn.invars[-1]
        x_shape = list(eqn.outvars[0].aval.shape)
        rate = 1.0 - self.scaled.get(kept, keep)
        if rate > 0:
            self._record(arithmetic.dropout(rate, shape, x_shape, _names(len(x_shape))))


_HANDLERS = {"reshape": _Walker._reshape, "squeeze": _Walker._reshape, "expand_dims": _Walker._reshape,
             "convert_element_type": _Walker._cast, "copy": _Walker._cast, "copy_p": _Walker._cast,
             "transpose": _Walker._transpose, "conv_general_dilated": _Walker._conv_general_dilated,
             "dot_general": _Walker._dot_general, "max": _Walker._max, "reduce_max": _Walker._reduce_max,
             "reduce_sum": _Walker._reduce_sum, "reduce_window_max": _Walker._reduce_window_max,
             "reduce_window_sum": _Walker._reduce_window_sum, "pad": _Walker._pad,
             "broadcast_in_dim": _Walker._broadcast_in_dim, "div": _Walker._div, "select_n": _Walker._select_n,
             "add": _Walker._add}


def _pure(model: nnx.Module, training: bool | None):
    """The model as a pure function of (parameters, other state, input), and its parameters' paths."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    paths = [path_name(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]

    def forward(params: Any, rest: Any, x: jax.Array) -> jax.Array:
        copy = nnx.merge(graphdef, params, rest)          # a copy: the caller's model keeps its modes and state
        if training is not None:
            copy.train() if training else copy.eval()
        out: jax.Array = copy(x)
        return out
    return forward, params, rest, paths


def trace(model: nnx.Module, x: jax.Array, training: bool | None) -> Trace:
    """The canonical ops of model(x) in training or evaluation mode (None: the modes its modules are in);
    the model itself is not changed (the pass runs on a copy of its state)."""
    forward, params, rest, paths = _pure(model, training)
    closed = jax.make_jaxpr(forward)(params, rest, x)
    walker = _Walker(int(x.shape[0]))
    for v, name in zip(closed.jaxpr.invars, paths):
        walker.param_of[v] = name
        walker.depends.add(v)
    walker.walk(closed.jaxpr)
    walker.trace.ops = [o for o in walker.trace.ops if not o.pop("folded", False)]
    return walker.trace


def training_flops(model: nnx.Module, input_size: int, dtype: Any = jnp.float32) -> dict:
    """Training FLOPs per sample of the model at this input size (a forward pass in evaluation mode, traced
    abstractly: nothing runs, no running statistics change and no random numbers are drawn)."""
    ops = trace(model, jnp.zeros((2, input_size, input_size, 3), dtype), training=False).ops
    return {**arithmetic.flops(ops), "how": "JAX: conv_general_dilated and dot_general of one forward pass's jaxpr "
            "(jax.make_jaxpr); " + arithmetic.HOW}

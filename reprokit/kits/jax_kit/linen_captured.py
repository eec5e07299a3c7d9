"""The Flax linen model a user's JAX script trains, in the certificate's canonical form, as the probe captured it.

A linen script's model is a ``flax.linen.Module`` and a variables pytree that its jitted step applies it with
(``model.apply(variables, x, ...)``, or a ``TrainState``'s ``apply_fn``). The probe sees ``Module.apply`` called
inside the trace of the step (``Applied``: the module, the call's own arguments, the shapes of each variable
collection) and finds the concrete variables among the step's arguments by those shapes (``find``): the pytree
its ``optax.apply_updates`` stepped is the ``params`` collection. ``LinenCaptured`` runs those variables through
that module, called as the step called it; its layers are the linen modules the call runs (``Conv_0``,
``Dense_0``, ``BatchNorm_0`` with ``batch_stats``), read from the objects while it runs (linen's method
interception, in the certificate's own passes only). Evaluation mode is every BatchNorm on its running statistics
and every Dropout off, whatever the script's call argument is named.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from flax.core import unfreeze
from flax.training.train_state import TrainState

from reprokit.kits.framework_free import certificate as cert
from reprokit.kits.framework_free import model_call, parting
from reprokit.kits.jax_kit import layer_settings, trace
from reprokit.kits.jax_kit.canonical import Layer, Param, layer_params, read_optimizer
from reprokit.kits.jax_kit.captured import Captured

INPUT = object()          # where the step's call passed an array: the certificate's input takes its place
_ROLES: list[tuple[type, str, list[tuple[str, str, str]]]] = [
    (nn.Conv, "conv", [("kernel", "params", "kernel"), ("bias", "params", "bias")]),
    (nn.Dense, "dense", [("kernel", "params", "kernel"), ("bias", "params", "bias")]),
    (nn.BatchNorm, "batchnorm", [("gamma", "params", "scale"), ("beta", "params", "bias"),
                                 ("moving_mean", "batch_stats", "mean"), ("moving_variance", "batch_stats", "var")])]
_MODES = {nn.BatchNorm: "use_running_average", nn.Dropout: "deterministic"}


def _signature(tree: Any) -> list[tuple[str, tuple]]:
    """A pytree's leaves as (path, shape): what a collection is matched by (a dict and a FrozenDict alike)."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [(trace.path_name(p), tuple(getattr(x, "shape", ()))) for p, x in leaves]


@dataclasses.dataclass
class Applied:
    """One ``Module.apply`` inside the trace of a step: the module, the call's arguments (INPUT for its array)
    and keyword arguments, the names of its random streams, its ``mutable`` and each collection's signature."""
    module: nn.Module
    args: list[Any]
    kwargs: dict[str, Any]
    rngs: list[str]
    mutable: Any
    method: Any
    collections: dict[str, list[tuple[str, tuple]]]
    arrays: int                               # how many array arguments the call had

    @classmethod
    def seen(cls, module: nn.Module, variables: Any, args: tuple, kwargs: dict) -> Applied:
        is_array = lambda v: isinstance(v, jax.Array) or hasattr(v, "aval")     # noqa: E731
        rest = {k: v for k, v in kwargs.items() if k not in ("rngs", "mutable", "method", "capture_intermediates")}
        rngs = kwargs.get("rngs")
        return cls(module, [INPUT if is_array(a) else a for a in args], rest,
                   list(rngs) if isinstance(rngs, dict) else ["params"] if rngs is not None else [],
                   kwargs.get("mutable", False), kwargs.get("method"),
                   {c: _signature(t) for c, t in dict(variables).items()},
                   sum(1 for a in [*args, *rest.values()] if any(is_array(x) for x in jax.tree.leaves(a))))


def _subtrees(x: Any, depth: int = 3) -> Iterator[Any]:
    """x and what it holds (a dict's values, a dataclass's fields, a sequence's items), three levels down."""
    yield x
    if depth == 0:
        return
    if isinstance(x, dict) or hasattr(x, "items") and callable(x.items):
        children = list(x.values())
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        children = [getattr(x, f.name, None) for f in dataclasses.fields(x)]
    elif isinstance(x, (tuple, list)):
        children = list(x)
    else:
        return
    for child in children:
        yield from _subtrees(child, depth - 1)


@dataclasses.dataclass
class Found:
    applied: Applied
    variables: dict[str, Any]                 # each collection's concrete pytree, from the step's arguments
    state: TrainState | None

    def count(self) -> int:
        return int(sum(np.prod(x.shape) for x in jax.tree.leaves(self.variables)))


def find(step: str, applied: list[Applied], stepped: list[tuple] | None, args: tuple) -> Found | str:
    """The linen model the step trains, its variables found among its arguments; else why not, in one sentence."""
    states = [s for a in args for s in _subtrees(a) if isinstance(s, TrainState)]
    if not applied:
        fn = getattr(states[0].apply_fn, "__qualname__", repr(states[0].apply_fn)) if states else None
        return (f"this script's jitted {step} trains a parameter pytree that no flax.linen Module.apply runs "
                + (f"(its TrainState's apply_fn is {fn})" if fn else "(only its own loss function applies it)")
                + ": the probe has no model object or apply_fn to run the same weights through")
    shapes = [s for _, s in applied[0].collections.get("params", [])]
    ours = [a for a in applied if stepped is None or [s for _, s in a.collections.get("params", [])] == stepped]
    if not ours:
        return (f"the flax.linen Module.apply in this script's jitted {step} ({type(applied[0].module).__name__}, "
                f"{len(shapes)} parameter arrays) is not given the parameters its update steps")
    a = ours[0]
    if a.arrays != 1:
        return (f"the {type(a.module).__name__}.apply in this script's jitted {step} takes {a.arrays} array arguments: "
                f"the certificate runs a model on one input")
    pool = [s for arg in args for s in _subtrees(arg)]
    variables = {}
    for collection, signature in a.collections.items():
        match = next((s for s in pool if s is not None and jax.tree.leaves(s) and _signature(s) == signature), None)
        if match is None:
            return (f"the {collection!r} variables that {type(a.module).__name__}.apply receives in this script's "
                    f"jitted {step} are not among its arguments (made inside the step)")
        variables[collection] = match
    return Found(a, variables, states[0] if states else None)


# -- the certificate's passes through linen's method interception -------------------------------------------

_observers: list[Callable[[str, nn.Module, tuple, dict, Any], None]] = []


@contextlib.contextmanager
def _observing(record: Callable[[str, nn.Module, tuple, dict, Any], None]) -> Iterator[None]:
    """Each leaf module's call (path, module, args, kwargs, output) reported while inside."""
    _observers.append(record)
    try:
        yield
    finally:
        _observers.remove(record)


def _force(m: nn.Module, args: tuple, kwargs: dict, attr: str, value: bool) -> tuple[tuple, dict]:
    """A BatchNorm's or Dropout's mode set for this call, whether the script gives it as an argument or an attribute."""
    if len(args) > 1:
        return (args[0], value, *args[2:]), kwargs
    if attr in kwargs or getattr(m, attr) is None:
        return args, {**kwargs, attr: value}
    object.__setattr__(m, attr, value)         # the call's own bound copy of the module, made for this apply
    return args, kwargs


def _interceptor(running_average: bool | None, dropout: bool | None) -> Callable[..., Any]:
    """Linen's method interceptor: modes forced where asked (None: as the call gives them), leaf calls reported."""
    stack: list[list[bool]] = []

    def intercept(next_fun: Callable[..., Any], args: tuple, kwargs: dict, context: Any) -> Any:
        m = context.module
        if context.method_name != "__call__":
            return next_fun(*args, **kwargs)
        if isinstance(m, nn.Dropout) and dropout is False:
            y = args[0]                        # what a deterministic Dropout returns
        else:
            if isinstance(m, nn.Dropout) and dropout:
                args, kwargs = _force(m, args, kwargs, "deterministic", False)
            if isinstance(m, nn.BatchNorm) and running_average is not None:
                args, kwargs = _force(m, args, kwargs, "use_running_average", running_average)
            if stack:
                stack[-1][0] = True
            stack.append([False])
            try:
                y = next_fun(*args, **kwargs)
            finally:
                inner = stack.pop()[0]
            if inner:
                return y
        for record in _observers:
            record("/".join(m.scope.path), m, args, kwargs, y)
        return y
    return intercept


class _Call:
    """How the script's step called the module (static to NNX: one object, not data)."""

    def __init__(self, a: Applied) -> None:
        self.linen, self.args, self.kwargs, self.mutable = a.module, tuple(a.args), dict(a.kwargs), a.mutable
        self.extra = {"method": a.method} if a.method is not None else {}
        self.streams = tuple(dict.fromkeys([*a.rngs, "dropout"]))     # dropout's too: the passes that force it on


def _values(tree: Any) -> Any:
    return jax.tree.map(lambda v: v.get_value(), tree, is_leaf=lambda v: isinstance(v, nnx.Variable))


class LinenModel(nnx.Module):
    """The linen module and its variables as one NNX module (what reprokit/kits/jax_kit/canonical.py reads and runs):
    ``params`` as nnx.Param, other collections as nnx.BatchStat; called as the script's step called it."""

    def __init__(self, found: Found) -> None:
        self.call = _Call(found.applied)
        # copies: the step may donate the buffers it received
        self.variables = nnx.data({c: jax.tree.map(lambda x, k=nnx.Param if c == "params" else nnx.BatchStat:
                                                   k(jnp.array(x)), unfreeze(t))
                                   for c, t in found.variables.items()})
        self.rngs = nnx.Rngs(0)
        self.running_average: bool | None = None          # None: as the script's call sets them
        self.dropout: bool | None = None
        self.part: model_call.Path = ()                    # the output's part compared

    def __call__(self, x: jax.Array) -> jax.Array:
        call = self.call
        args = [x if a is INPUT else a for a in call.args]
        key = self.rngs()
        rngs = {name: jax.random.fold_in(key, i) for i, name in enumerate(call.streams)}
        with nn.intercept_methods(_interceptor(self.running_average, self.dropout)):
            out = call.linen.apply(_values(self.variables), *args, rngs=rngs, mutable=call.mutable, **call.extra,
                                   **call.kwargs)
        if call.mutable:
            out, updates = out
            for c, tree in unfreeze(updates).items():
                if c in self.variables:
                    jax.tree.map(lambda v, u: v.set_value(u), self.variables[c], tree,
                                 is_leaf=lambda v: isinstance(v, nnx.Variable))
        return model_call.pick(out, self.part)


def _described(a: Applied, out: Any, rows: int) -> model_call.ModelCall:
    """The step's ``Module.apply`` call as the certificate replays it, and the part of its output compared (its
    only array, or the first (batch, k) one: the probe does not see what a linen step's loss reads)."""
    is_shaped = lambda v: hasattr(v, "shape") and hasattr(v, "dtype")      # noqa: E731
    call = model_call.record(type(a.module).__name__, type(a.module).__call__.__get__(a.module), tuple(a.args),
                             a.kwargs, lambda v: v is INPUT, lambda v: None, lambda v: "its batch")
    call.part, call.part_why = model_call.choose_part(out, is_shaped, None, rows)
    return call


def _at(tree: Any, parts: list[str]) -> Any:
    for p in parts:
        if not isinstance(tree, dict) or p not in tree:
            return None
        tree = tree[p]
    return tree


class LinenCaptured(Captured):
    """The script's linen module with the variables its first step received; its optimizer where a TrainState
    carries it."""

    def __init__(self, found: Found, x: np.ndarray, expects_logits: bool | None, who: str) -> None:
        self.model, self.who, self.trace = LinenModel(found), who, None
        self._expects_logits = expects_logits
        self.x_first = np.asarray(x, np.float32)
        self.x_trace = self.x_first[:cert.TRACE_BATCH]
        self.layers: dict[str, nn.Module] = {}
        self.trained_modes: dict[str, bool] = {}
        self.calls: dict[str, int] = {}

        def seen(path: str, m: nn.Module, args: tuple, kwargs: dict, _y: Any) -> None:
            self.layers.setdefault(path, m)
            self.calls[path] = self.calls.get(path, 0) + 1
            attr = next((a for cls, a in _MODES.items() if isinstance(m, cls)), None)
            if attr is not None:
                given = args[1] if len(args) > 1 else kwargs.get(attr)
                self.trained_modes[path] = bool(given if given is not None else getattr(m, attr))
        self.dtype = jax.tree.leaves(nnx.state(self.model, nnx.Param))[0].dtype
        graphdef, state = nnx.split(self.model)
        with _observing(seen):          # abstractly: nothing runs, no statistics change
            out = jax.eval_shape(lambda s, x: nnx.merge(graphdef, s)(x), state, self._inputs(self.x_trace))
        self.call = _described(found.applied, out, len(self.x_trace))
        self.model.part = self.call.part
        self._canonical()
        state_ = found.state
        self.optimizer = (read_optimizer(state_.tx, state_.opt_state) if state_ is not None else
                          {"class": "not read: the training step received no TrainState (its optax transform is "
                                    "not among its arguments)", "name": None})

    def _set_mode(self, training: bool, dropout: bool) -> None:
        """Training: the script's call (dropout off where asked); evaluation: running statistics, dropout off."""
        self.model.running_average = None if training else True
        self.model.dropout = None if training and dropout else False

    def _map(self) -> list[Param]:
        """The linen layers with weights in the order the forward pass first uses them, as canonical records."""
        order: list[str] = []
        for used in self.trace.uses:          # "variables/params/Conv_0/kernel"
            where = "/".join(used.split("/")[2:-1])
            if where not in order:
                order.append(where)
        layers = []
        for where in order:
            module = self.layers.get(where)
            kind, roles = next(((k, r) for cls, k, r in _ROLES if isinstance(module, cls)), (None, []))
            variables = [(role, attr, _at(self.model.variables.get(collection), [*where.split("/"), attr]),
                          f"{collection}/{where}/{attr}") for role, collection, attr in roles]
            rows = self.trace.rows.get(f"variables/params/{where}/kernel")
            layers.append(Layer(where, module, kind, variables, rows))
        params = layer_params(layers, lambda layer: f"Flax linen layer {layer.where} ({type(layer.module).__name__}) "
                                                    f"of {self.who}", "nn.Conv, nn.Dense, nn.BatchNorm")
        mapped = {id(p.variable) for p in params}
        unused = [trace.path_name(p) for p, v in jax.tree_util.tree_flatten_with_path(
            self.model.variables["params"], is_leaf=lambda v: isinstance(v, nnx.Variable))[0]
            if id(v) not in mapped]
        if unused:
            raise cert.UnmappableModel(f"Flax parameters {', '.join(unused[:3])} of {self.who} are not used by a "
                                       f"mapped layer in the forward pass")
        return params

    def modes(self) -> dict[str, Any]:
        """Where the script's call ran a BatchNorm or a Dropout in evaluation mode: the trace with every one of
        them in training mode beside it."""
        off = [f"{path} ({type(self.layers[path]).__name__})" for path, v in self.trained_modes.items() if v]
        if not off:
            return {"in_eval": [], "ops_as_built": None}
        self.model.running_average, self.model.dropout = False, True
        try:
            return {"in_eval": off, "ops_as_built": trace.trace(self.model, self._inputs(self.x_trace), None).ops}
        finally:
            self._set_mode(True, dropout=True)

    def shared(self) -> list[str]:
        """Layers with weights that one forward pass calls at more than one place."""
        return [f"{path} ({type(self.layers[path]).__name__}) at {n} places" for path, n in self.calls.items()
                if n > 1 and any(isinstance(self.layers[path], cls) for cls, _, _ in _ROLES)]

    def layer_outputs(self, x: np.ndarray, training: bool) -> list[tuple[dict[str, Any], np.ndarray]]:
        """Every leaf layer's output in call order, dropout off, with its settings
        (reprokit/kits/framework_free/parting.py)."""
        out: list[tuple[dict[str, Any], np.ndarray]] = []

        def record(path: str, m: nn.Module, args: tuple, _kwargs: dict, y: Any) -> None:
            if hasattr(y, "shape") and args and hasattr(args[0], "shape"):
                family, settings = layer_settings.read(m, [int(s) for s in args[0].shape])
                out.append((parting.entry(path, type(m).__name__, family, settings, y.shape),
                            np.asarray(y, np.float64)))
        self._set_mode(training, dropout=False)
        with _observing(record):
            self.model(self._inputs(x))
        return out

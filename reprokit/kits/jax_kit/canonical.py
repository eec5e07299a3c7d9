"""A Flax NNX model in the certificate's canonical form (reprokit/kits/framework_free/certificate.py), and its passes.

Flax is NHWC with HWIO kernels and (in, out) dense kernels: the canonical form already, except a dense
layer fed by a feature map through transposes, whose rows the trace (reprokit/kits/jax_kit/trace.py) puts in
(h, w, c) order. Layers are numbered per kind in the order the traced forward pass first uses their
parameters. Dropout is switched off by a mode that keeps BatchNorm as it is (``Dropout.deterministic``),
so that two frameworks' random masks cannot differ.
"""
from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from reprokit.kits.framework_free import arithmetic, custom, parting
from reprokit.kits.framework_free import certificate as cert
from reprokit.kits.jax_kit import layer_settings, trace

_ROLES = {nnx.Conv: ("conv", [("kernel", "kernel"), ("bias", "bias")]),
          nnx.Linear: ("dense", [("kernel", "kernel"), ("bias", "bias")]),
          nnx.BatchNorm: ("batchnorm", [("gamma", "scale"), ("beta", "bias"), ("moving_mean", "mean"),
                                        ("moving_variance", "var")])}


@dataclass
class Param:
    record: dict
    path: str                                       # "layers/0/kernel", as the trace and the gradients name it
    variable: Any                                   # the nnx.Variable in the model
    to_canonical: Callable[[np.ndarray], np.ndarray]
    from_canonical: Callable[[np.ndarray], np.ndarray]


def same(a: np.ndarray) -> np.ndarray:
    return a


@dataclass
class Layer:
    """A layer with weights as the forward pass first uses it: its path, the module, its canonical kind (None: none
    known), its (role, name, variable, path) for each weight, and a dense kernel's input rows as the trace saw them."""
    where: str
    module: Any
    kind: str | None
    variables: list[tuple[str, str, Any, str]]
    rows: Any = None


def layer_params(layers: list[Layer], named: Callable[[Layer], str], known: str) -> list[Param]:
    """The canonical records of a Flax model's layers with weights, nnx or linen alike. ``named`` says a layer in
    an error; ``known`` lists the layers that have a canonical form."""
    params, counters = [], {}
    for layer in layers:
        name = named(layer)
        if layer.kind is None:
            raise cert.UnmappableModel(f"{name} has weights but no canonical form (known: {known})")
        if getattr(layer.module, "feature_group_count", 1) != 1:
            raise cert.UnmappableModel(f"{name} is a grouped convolution (feature_group_count="
                                       f"{layer.module.feature_group_count}), which has no canonical form here")
        counters[layer.kind] = counters.get(layer.kind, 0) + 1
        for role, attr, variable, path in layer.variables:
            if variable is None:
                continue
            to_c, from_c = same, same
            if role == "kernel" and layer.kind == "dense":
                to_c = lambda k, r=layer.rows: arithmetic.rows_to_canonical(k, r)        # noqa: E731
                from_c = lambda k, r=layer.rows: arithmetic.rows_from_canonical(k, r)    # noqa: E731
            shape = tuple(variable.get_value().shape)
            rec = cert.record(layer.kind, counters[layer.kind], role, shape, f"{layer.where}.{attr}".lstrip("."), shape)
            params.append(Param(rec, path, variable, to_c, from_c))
    return params


def modules(model: nnx.Module) -> dict[str, nnx.Module]:
    """Every module of the model by its path ("layers/3"), the model itself as ""."""
    return {"/".join(str(k) for k in path): node for path, node in nnx.iter_graph(model)
            if isinstance(node, nnx.Module)}


@contextlib.contextmanager
def wrapped_calls(classes: Iterable[type], wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """Each class's ``__call__`` (looked up on the class, as a call of a module is) replaced by ``wrap`` of it while
    inside, and given back after (removed where the class inherited it)."""
    classes = list(dict.fromkeys(classes))
    own = {cls: cls.__dict__.get("__call__") for cls in classes}
    for cls in classes:
        cls.__call__ = wrap(cls.__call__)
    try:
        yield
    finally:
        for cls in classes:
            if own[cls] is None:
                delattr(cls, "__call__")
            else:
                cls.__call__ = own[cls]


def set_mode(model: nnx.Module, training: bool, dropout: bool) -> None:
    """Training or evaluation mode (BatchNorm's batch or running statistics), dropout on or off."""
    model.train() if training else model.eval()
    if not dropout:
        for m in modules(model).values():
            if isinstance(m, nnx.Dropout):
                m.deterministic = True


def _transforms(tx: Any) -> list[tuple[str, dict[str, Any]]]:
    """The optax transforms of a (chained) GradientTransformation, each with the plain values its update
    function closes over: what optax.adam / optax.sgd were built with, read from the object."""
    nonlocals = inspect.getclosurevars(tx.update).nonlocals
    if "update_fns" in nonlocals:
        return [t for fn in nonlocals["update_fns"] for t in _transforms(_Unwrapped(fn))]
    if "tx" in nonlocals:
        return _transforms(nonlocals["tx"])
    name = tx.update.__qualname__.split(".<locals>")[0]
    return [(name, {k: v for k, v in nonlocals.items() if isinstance(v, (bool, int, float)) or v is None})]


@dataclass
class _Unwrapped:
    update: Callable[..., Any]


def _injected(tx: Any, opt_state: Any) -> dict[str, Any] | None:
    """An optax.inject_hyperparams transform's hyper-parameters as its state holds them (float32 values written
    back in their shortest form: 0.999, not 0.9990000128746033), with the factory's name and its static ones."""
    hyper = getattr(opt_state, "hyperparams", None)
    nonlocals = inspect.getclosurevars(tx.init).nonlocals
    if not isinstance(hyper, dict) or "inner_factory" not in nonlocals:
        return None
    values = {k: np.asarray(v.get_value() if hasattr(v, "get_value") else v) for k, v in hyper.items()}
    out: dict[str, Any] = {k: float(str(v)) for k, v in values.items()}
    return {**nonlocals.get("other_hps", {}), **out, "factory": nonlocals["inner_factory"].__name__}


def read_optimizer(tx: Any, opt_state: Any = None) -> dict[str, Any]:
    """An optax transform read back from the object: Adam (scale_by_adam) or SGD (trace for momentum), and
    the learning rate from its scale (optax scales by -lr); the kit's (optax.inject_hyperparams) from the values
    its state holds. A schedule is not a plain value and reads as None."""
    injected = _injected(tx, opt_state)
    if injected is not None:
        if injected["factory"] == "adam":
            return {"class": "optax.adam", "name": "adam", "lr": injected["learning_rate"], "beta1": injected["b1"],
                    "beta2": injected["b2"], "epsilon": injected["eps"], "eps_root": injected.get("eps_root"),
                    "amsgrad": False, "weight_decay": 0.0}
        return {"class": "optax.sgd", "name": "sgd", "lr": injected["learning_rate"],
                "momentum": float(injected.get("momentum") or 0.0), "nesterov": bool(injected.get("nesterov")),
                "dampening": 0.0, "weight_decay": 0.0}
    parts = dict(_transforms(tx))
    scale = parts.get("scale", {}).get("step_size")
    lr = -float(scale) if isinstance(scale, (int, float)) else None
    if "scale_by_adam" in parts:
        a = parts["scale_by_adam"]
        return {"class": "optax.adam", "name": "adam", "lr": lr, "beta1": a.get("b1"), "beta2": a.get("b2"),
                "epsilon": a.get("eps"), "eps_root": a.get("eps_root"), "amsgrad": False, "weight_decay": 0.0}
    t = parts.get("trace", {})
    return {"class": "optax.sgd", "name": "sgd", "lr": lr, "momentum": float(t.get("decay") or 0.0),
            "nesterov": bool(t.get("nesterov", False)), "dampening": 0.0, "weight_decay": 0.0}


class Canonical:
    """A built model's canonical form and passes; subclasses give ``model``, ``who``, ``_inputs`` and ``x_trace``."""
    framework = "jax"
    model: Any
    who: str
    x_trace: np.ndarray
    _inputs: Callable[[np.ndarray], jax.Array]
    traced_in: bool | None = True        # the trace's mode: training (None: the modes its modules are in)

    def _set_mode(self, training: bool, dropout: bool) -> None:
        set_mode(self.model, training, dropout)

    def _canonical(self) -> None:
        self.dtype = jax.tree.leaves(nnx.state(self.model, nnx.Param))[0].dtype
        if self.trace is None:
            self._set_mode(True, dropout=True)
            try:
                self.trace = trace.trace(self.model, self._inputs(self.x_trace), training=self.traced_in)
            except Exception as exc:
                if custom.from_the_kit(exc):
                    raise
                shape = tuple(self.x_trace.shape)
                raise custom.BadModel(f"the model from {self.who} fails on a batch of shape {shape}: "
                                      f"{custom.one_line(exc)}{custom.where(exc)}") from None
        self.params = self._map()

    def _map(self) -> list[Param]:
        """The parametric modules in the order the forward pass first uses them, as canonical records."""
        by_path = modules(self.model)
        order: list[str] = []
        for used in self.trace.uses:
            where = used.rsplit("/", 1)[0] if "/" in used else ""
            if where not in order:
                order.append(where)
        layers = []
        for where in order:
            module = by_path[where]
            kind_roles = _ROLES.get(type(module))
            variables = [(role, attr, getattr(module, attr, None), f"{where}/{attr}".lstrip("/"))
                         for role, attr in (kind_roles[1] if kind_roles else [])]
            layers.append(Layer(where, module, kind_roles and kind_roles[0], variables,
                                self.trace.rows.get(f"{where}/kernel".lstrip("/"))))
        params = layer_params(layers, lambda layer: f"Flax layer {layer.where} ({type(layer.module).__name__}) of "
                                                    f"{self.who}", "nnx.Conv, nnx.Linear, nnx.BatchNorm")
        mapped = {id(p.variable) for p in params}
        unused = ["/".join(map(str, path)) for path, v in nnx.iter_graph(self.model)
                  if isinstance(v, nnx.Param) and id(v) not in mapped]
        if unused:
            raise cert.UnmappableModel(f"Flax parameters {', '.join(unused[:3])} of {self.who} are not used by a "
                                       f"mapped layer in the forward pass")
        return params

    def records(self) -> list[dict]:
        return [p.record for p in self.params]

    def last_layer(self) -> str:
        return self.params[-1].record["native"]["name"].rsplit(".", 1)[0] if self.params else "(none)"

    def export(self) -> dict[str, np.ndarray]:
        return {p.record["name"]: np.array(p.to_canonical(np.asarray(p.variable.get_value())), order="C", copy=True)
                for p in self.params}

    def load(self, weights: dict[str, np.ndarray]) -> None:
        for p in self.params:
            native = np.ascontiguousarray(p.from_canonical(weights[p.record["name"]]))
            p.variable.set_value(jnp.asarray(native, dtype=self.dtype))

    def dropout_off(self) -> None:
        """Nothing to do: every pass but the dropout passes sets its own mode, dropout off."""

    # -- passes ---------------------------------------------------------------------------------
    def _run(self, x: jax.Array, passes: int = 1) -> list[jax.Array]:
        """``passes`` forward passes of the model as it is now, through one compiled function of its graph
        (which holds its modes); its state (running statistics, dropout keys) is updated after."""
        graphdef, state = nnx.split(self.model)
        outs = []
        for _ in range(passes):
            out, state = _apply(graphdef, state, x)
            outs.append(out)
        nnx.update(self.model, state)
        return outs

    def logits(self, x: np.ndarray, training: bool) -> list[list[float]]:
        """Evaluation or training mode, dropout off; a training-mode pass updates BatchNorm's running
        statistics, as the other kits' do (the caller loads the weights again)."""
        self._set_mode(training, dropout=False)
        return np.asarray(self._run(self._inputs(x))[0], np.float64).tolist()

    def train_outputs(self, x: np.ndarray, passes: int) -> list[list[list[float]]]:
        """``passes`` forward passes in training mode, dropout as the kit trains (a new key each pass)."""
        self._set_mode(True, dropout=True)
        return [np.asarray(o, np.float64).tolist() for o in self._run(self._inputs(x), passes)]

    def layer_outputs(self, x: np.ndarray, training: bool) -> list[tuple[dict, np.ndarray]]:
        """Each layer's output of an nnx.Sequential in call order, dropout off, with its settings."""
        layers = getattr(self.model, "layers", None)
        if not isinstance(self.model, nnx.Sequential) or layers is None:
            raise TypeError(f"the layers of {type(self.model).__name__} are read one by one only in an nnx.Sequential")
        self._set_mode(training, dropout=False)
        names = {id(m): p for p, m in modules(self.model).items()}
        out: list[tuple[dict, np.ndarray]] = []
        h = self._inputs(x)
        for layer in layers:
            shape = [int(s) for s in h.shape]
            h = layer(h)
            family, settings = layer_settings.read(layer, shape)
            y = np.asarray(h, np.float64)
            out.append((parting.entry(names.get(id(layer), "?"), type(layer).__name__, family, settings, y.shape), y))
        return out


def _apply(graphdef: Any, state: Any, x: jax.Array) -> tuple[jax.Array, Any]:
    """One forward pass, op by op: not jitted, because a reference pass runs a few times per certificate and
    a compiled graph costs seconds per model, where each primitive compiles once per shape for every pair."""
    model = nnx.merge(graphdef, state)
    out = model(x)
    return out, nnx.state(model)

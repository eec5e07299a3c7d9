"""The script's jitted functions, watched: which is its training step, the batches each call received, its
compilations.

``jax.jit`` and ``nnx.jit`` give back a ``Watched`` function for every function the script's own files jit
(the jits JAX's and Flax's own code makes inside them are left alone). On its first call a watched function
is traced without running (``.trace``, which JAX caches for the call that follows: nothing is traced twice),
and what the trace did decides what it is:

- a **training step** applies an update to parameters in its trace: ``optax.apply_updates`` (which
  ``nnx.Optimizer.update`` calls too), or, in a loop without optax, it takes a gradient (``jax.grad``,
  ``jax.value_and_grad``) and returns a pytree shaped like one of its arguments (the updated parameters);
- an **evaluation** is any other watched function that receives the trained state: an array the last
  training step returned, or a Flax module or optimizer it received;
- anything else (a jitted augmentation, a metric of labels alone) is not the model's and is not reported.

The batch of a call is the leading dimension of the first array among its arguments that are not that state
(the Flax objects, the pytrees shaped like the step's outputs, the arrays the last step returned). A call
whose function's cache of executables grew compiled: the first call per input shape, counted and timed.
"""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import optax
from flax import nnx

from reprokit.kits.framework_free.measure import now
from reprokit.kits.jax_kit import first_call
from reprokit.kits.jax_kit.linen_captured import Applied

TRAIN, EVAL, OTHER = "train step", "evaluation", "not the model's"
LOGITS_LOSS = "a loss of logits"          # what the training step's trace marks where it calls one
LOGITS_LOSSES = ("softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels")
PER_DEVICE_MAPS = ("shard_map", "xla_pmap")      # the primitives of jax.shard_map and jax.pmap


class Tracing:
    """What the trace of the watched function being traced did (the hooks below report into it)."""

    def __init__(self) -> None:
        self.stack: list[Watched] = []

    def mark(self, what: str, params: Any = None) -> None:
        if self.stack:
            self.stack[0].seen.add(what)
            if params is not None and self.stack[0].params is None:
                self.stack[0].params = [tuple(x.shape) for x in jax.tree.leaves(params)]


def _marking(real: Callable, tracing: Tracing, what: str, takes_params: bool = False) -> Callable:
    @functools.wraps(real)
    def marked(*args, **kwargs):
        tracing.mark(what, args[0] if takes_params and args else None)
        return real(*args, **kwargs)
    return marked


def _applying(real: Callable, tracing: Tracing) -> Callable:
    @functools.wraps(real)
    def apply(module: nn.Module, variables: Any, *args: Any, **kwargs: Any) -> Any:
        if tracing.stack:
            tracing.stack[0].applied.append(Applied.seen(module, variables, args, kwargs))
        return real(module, variables, *args, **kwargs)
    return apply


def _loss_marking(real: Callable, tracing: Tracing) -> Callable:
    """A loss of logits, marked; the logits it reads kept, for the certificate's part of the model's output."""
    @functools.wraps(real)
    def marked(*args, **kwargs):
        tracing.mark(LOGITS_LOSS)
        if tracing.stack:
            tracing.stack[0].loss_inputs.append(kwargs.get("logits", args[0] if args else None))
        return real(*args, **kwargs)
    return marked


def hook_traces(tracing: Tracing) -> list[str]:
    """optax.apply_updates, the gradients, optax's losses of logits and flax.linen's Module.apply, which mark the
    trace they run in (outside one they do nothing)."""
    optax.apply_updates = _marking(optax.apply_updates, tracing, "update", takes_params=True)
    nn.Module.apply = _applying(nn.Module.apply, tracing)
    for name in ("grad", "value_and_grad"):
        setattr(jax, name, _marking(getattr(jax, name), tracing, "grad"))
    for name in LOGITS_LOSSES:              # optax.X and optax.losses.X are one function: one mark for both
        marked = _loss_marking(getattr(optax.losses, name), tracing)
        setattr(optax, name, marked)
        setattr(optax.losses, name, marked)
    return ["optax.apply_updates (nnx.Optimizer.update calls it), jax.grad and jax.value_and_grad: marked when they "
            "run inside the trace of a function the script jitted (its update, its gradient)",
            f"optax's {' and '.join(LOGITS_LOSSES)}: marked where they run in such a trace (a loss of logits)",
            "flax.linen's Module.apply: the module and how it was called, where it runs in such a trace"]


def _cache_size(compiled: Any) -> int | None:
    """How many executables the jitted function holds (nnx.jit keeps its jax.jit in ``jitted_fn``)."""
    inner = getattr(compiled, "jitted_fn", compiled)
    size = getattr(inner, "_cache_size", None)
    return size() if callable(size) else None


def _is_graph(x: Any) -> bool:
    return isinstance(x, (nnx.Module, nnx.Optimizer))


def _shapes(tree: Any) -> tuple:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple(tuple(getattr(x, "shape", ())) for x in leaves)


class Watched:
    """A function the script jitted, called as the script calls it; its calls become the Observer's events."""

    def __init__(self, compiled: Any, steps: Any, name: str) -> None:
        self._compiled, self._steps, self.name = compiled, steps, name
        self.kind: str | None = None
        self.seen: set[str] = set()                   # what its trace did: "update", "grad"
        self.params: list[tuple] | None = None        # the shapes of the parameters its update stepped
        self.applied: list[Applied] = []              # the flax.linen Module.apply calls its trace made
        self.state_args: set[int] | None = None       # which positional arguments are the state, not the batch
        self.model_calls: list[tuple] = []            # its trace's outermost calls of the Flax modules it received
        self.loss_inputs: list[Any] = []              # ... and the logits its losses of logits read
        self.per_device: bool | None = None           # its trace maps a function over devices (shard_map, pmap)
        self.calls = 0
        functools.update_wrapper(self, getattr(compiled, "__wrapped__", compiled), updated=())

    def __call__(self, *args, **kwargs):
        steps = self._steps
        if steps.tracing.stack or steps.certifying:        # called inside another's trace, or the certificate's
            return self._compiled(*args, **kwargs)
        if self.kind is None:
            self._classify(args, kwargs)
        return steps.called(self, args, kwargs)

    def run(self, args: tuple, kwargs: dict) -> tuple[Any, float | None]:
        """The call itself; the seconds it took where it compiled (its cache grew), else None."""
        before, t0 = _cache_size(self._compiled), now()
        out = self._compiled(*args, **kwargs)
        self.calls += 1
        after = _cache_size(self._compiled)
        return out, (now() - t0) if before is not None and after is not None and after > before else None

    def _classify(self, args: tuple, kwargs: dict) -> None:
        tracing = self._steps.tracing
        tracing.stack.append(self)
        try:
            with first_call.recording(args, self.model_calls):
                traced = self._compiled.trace(*args, **kwargs)
        finally:
            tracing.stack.pop()
        self.per_device = _maps_per_device(getattr(traced, "traced", traced).jaxpr.jaxpr)   # nnx.jit's holds jax's
        outputs = _output_shapes(traced)
        shaped_like_output = {i for i, a in enumerate(args) if not _is_graph(a) and _shapes(a) in outputs}
        if "update" in self.seen or ("grad" in self.seen and shaped_like_output):
            self.kind = TRAIN
            self.state_args = shaped_like_output | {i for i, a in enumerate(args) if _is_graph(a)}
            if self.params is None and shaped_like_output:    # no optax update: the first state argument
                self.params = [tuple(getattr(x, "shape", ())) for x in jax.tree.leaves(args[min(shaped_like_output)])]
        else:
            self.kind = OTHER                 # an evaluation once it is seen to receive the trained state

    def batch(self, args: tuple, kwargs: dict, trained: set[int]) -> int | None:
        """The leading dimension of the first array among the arguments that are not the state."""
        if self.state_args is None and trained:       # decided at its first call after a training step
            self.state_args = {i for i, a in enumerate(args) if id(a) in trained or
                               (not _is_graph(a) and any(id(x) in trained for x in jax.tree.leaves(a)))}
            if self.kind == OTHER and self.state_args:
                self.kind = EVAL
        rest = [a for i, a in enumerate(args) if i not in (self.state_args or ()) and not _is_graph(a)]
        for leaf in jax.tree.leaves((rest, kwargs)):
            shape: tuple[int, ...] = tuple(getattr(leaf, "shape", ()))
            if shape and id(leaf) not in trained:
                return int(shape[0])
        return None

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    def __getattr__(self, name: str) -> Any:          # .lower, .trace, .eval_shape, ... as the script uses them
        if name == "_compiled":                       # not yet set (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self._compiled, name)


def _output_shapes(traced: Any) -> list[tuple]:
    """The tree structure and shapes of the traced function's output, whole and each of a tuple's items (a
    namedtuple such as stax's OptimizerState is one state, shaped like the argument it updates)."""
    info = getattr(traced, "out_info", None)        # nnx.jit's: its pure outputs (its graph objects are apart)
    if info is None:
        return []
    parts = [info, *info] if isinstance(info, (tuple, list)) else [info]
    return [_shapes(p) for p in parts]


def _maps_per_device(jaxpr: Any) -> bool:
    """Does the trace run a function per device (``shard_map``, ``pmap``), at any depth? There each device's
    BatchNorm averages its own share unless it names the mapped axis; under ``jit`` alone over a sharded batch,
    XLA computes each mean over the whole batch, whatever the devices."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in PER_DEVICE_MAPS:
            return True
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)            # a ClosedJaxpr holds its Jaxpr
                if hasattr(inner, "eqns") and _maps_per_device(inner):
                    return True
    return False


def jit_hook(real: Callable, steps: Any, own_files: tuple[str, ...]) -> Callable:
    """A jit that watches the functions the script's own files jit (decorator forms included)."""
    @functools.wraps(real)
    def jit(fun: Any = None, *args: Any, _caller: str | None = None, **kwargs: Any) -> Any:
        caller = _caller or sys._getframe(1).f_code.co_filename
        if not callable(fun):                 # @nnx.jit(donate_argnums=...): the function comes next
            return lambda f: jit(f, *args, _caller=caller, **kwargs)
        compiled = real(fun, *args, **kwargs)
        if not caller.startswith(own_files):
            return compiled
        return Watched(compiled, steps, getattr(fun, "__name__", repr(fun)))
    return jit

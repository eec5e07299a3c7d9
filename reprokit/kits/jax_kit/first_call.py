"""The call a JAX script made of the Flax NNX model it trains, at its first step
(reprokit/kits/framework_free/model_call.py).

The model is called inside the script's jitted training step, so the call is recorded while the probe traces that
step (reprokit/kits/jax_kit/probe_steps.py): the ``__call__`` of each Flax module the step receives is watched for that
one trace, and its outermost call kept with its arguments and output. Inside the trace its arrays are tracers: the
batch's place is taken by the certificate's input, another array is the step's own argument of that shape and
dtype, and a ``Rngs`` is the one the step received (by value: a copy of it, so that the certificate's passes draw
from it as the script's call would). The part of the output compared is the one an optax loss of logits read in
that trace.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
from flax import nnx

from reprokit.kits.framework_free import model_call
from reprokit.kits.framework_free.model_call import ARRAY, RNG, ModelCall
from reprokit.kits.jax_kit.canonical import wrapped_calls

RNGS_ATTRIBUTE = "certificate_rngs"     # where the certificate keeps its copy of the script's Rngs, in the model


def is_array(value: Any) -> bool:
    return isinstance(value, (jax.Array, jax.core.Tracer)) and not _is_key(value)


def _is_key(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _rng(value: Any) -> str | None:
    if isinstance(value, (nnx.Rngs, nnx.RngStream)):
        return f"an nnx.{type(value).__name__}"
    return "a PRNG key" if _is_key(value) else None


def _shape(x: Any) -> str:
    return f"{x.dtype} {tuple(x.shape)}"


def _modules(args: tuple) -> list[nnx.Module]:
    found = [a for a in args if isinstance(a, nnx.Module)]
    found += [a.model for a in args if isinstance(a, nnx.Optimizer) and isinstance(getattr(a, "model", None),
                                                                                  nnx.Module)]
    return found


@contextlib.contextmanager
def recording(args: tuple, into: list[tuple[type, tuple, dict, Any]]) -> Iterator[None]:
    """While inside: the outermost call of each Flax module class among ``args`` appended to ``into`` as
    (class, args, kwargs, output). The classes' own ``__call__`` is restored after."""
    depth = [0]

    def watch(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: nnx.Module, *a: Any, **k: Any) -> Any:
            depth[0] += 1
            try:
                out = real(self, *a, **k)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                into.append((type(self), a, k, out))
            return out
        return call
    with wrapped_calls((type(m) for m in _modules(args)), watch):
        yield


def record(model: nnx.Module, seen: list[tuple[type, tuple, dict, Any]], step_args: tuple,
           loss_inputs: list[Any]) -> ModelCall:
    """The trained model's call from the step's trace, its tracers matched to the step's own arguments."""
    mine = next((c for c in seen if c[0] is type(model)), None)
    if mine is None:
        raise model_call.Unreplayable(f"the script's {type(model).__name__} was not called inside its jitted "
                                      f"training step, so the probe did not see how the script calls it")
    _, args, kwargs, output = mine
    call = model_call.record(type(model).__name__, type(model).__call__.__get__(model), args, kwargs, is_array,
                             _rng, _shape)
    outer = [x for x in jax.tree.leaves([a for a in step_args if not isinstance(a, (nnx.Module, nnx.Optimizer,
                                                                                     nnx.Pytree))])]
    for a in [*call.args, *call.kwargs.values()]:
        if a.role == RNG and isinstance(a.value, (nnx.Rngs, nnx.RngStream)):
            given = next((s for s in step_args if isinstance(s, type(a.value))), None)
            a.value = given if given is not None else nnx.Rngs(0)
            a.text = (f"an nnx.{type(a.value).__name__} (the step's own, by value)" if given is not None else
                      "a new nnx.Rngs(0) (the script made its own inside the step)")
        elif a.role in (ARRAY, RNG) and isinstance(a.value, jax.core.Tracer):
            a.value = _outer(a, outer, type(model).__name__)
    rows = next((int(a.value.shape[0]) for a in call.args if a.role == model_call.BATCH
                 and getattr(a.value, "shape", ())), None)
    call.part, call.part_why = model_call.choose_part(
        output, is_array, (lambda t: any(t is seen_input for seen_input in loss_inputs)) if loss_inputs else None, rows)
    return call


def _outer(a: model_call.Argument, outer: list[Any], model: str) -> Any:
    """The step's own argument that a tracer of the model's call stands for: the one of its shape and dtype."""
    tracer = a.value
    same = [x for x in outer if getattr(x, "shape", None) == tracer.shape and getattr(x, "dtype", None) == tracer.dtype]
    if len(same) != 1:
        raise model_call.Unreplayable(
            f"the script calls its {model} with {a.name}, an array its jitted step computes "
            f"({_shape(tracer)}), which the certificate cannot call it with again: certify a script whose step "
            f"passes the model its batch and arrays it receives")
    return same[0]


def replay_calls(model: nnx.Module, call: ModelCall) -> None:
    """Every later outermost call of the model's class replays the script's call: its other arguments, a copy of
    its Rngs kept in the model (so that each pass draws anew, split and merged with the model's state), and the
    output's part its loss read. The script stops after its certificate, so the class keeps the replay."""
    if call.plain():
        return
    cls = type(model)
    real = cls.__call__
    rngs = [a for a in [*call.args, *call.kwargs.values()] if a.role == RNG and isinstance(a.value, nnx.Pytree)]
    for i, a in enumerate(rngs):
        setattr(model, f"{RNGS_ATTRIBUTE}_{i}", nnx.clone(a.value))
    depth = [0]

    def replayed(self: nnx.Module, x: Any, *args: Any, **kwargs: Any) -> Any:
        if depth[0]:                        # a module of the same class inside the model
            return real(self, x, *args, **kwargs)
        own = {id(a.value): getattr(self, f"{RNGS_ATTRIBUTE}_{i}") for i, a in enumerate(rngs)}

        def run(*a: Any, **k: Any) -> Any:
            return real(self, *[own.get(id(v), v) for v in a], **{n: own.get(id(v), v) for n, v in k.items()})
        depth[0] += 1
        try:
            return call.replay(run, x)
        finally:
            depth[0] -= 1
    cls.__call__ = replayed

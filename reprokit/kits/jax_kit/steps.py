"""The kit's jitted steps: pure functions of the whole train state, as Flax's "Performance considerations"
guide writes them (``nnx.split`` once, ``nnx.merge`` inside the step, the new state out).

The train state is the model's and the optimizer's NNX state: parameters, BatchNorm statistics, the
dropout stream's key and count (each call draws fresh keys from it), the optimizer's moments and step.
Beside it, two on-device sums (loss times samples, correct predictions) that the steps add to. The state is
donated to every training step: XLA writes the new state into the old one's buffers, and nothing is read
back to the host inside a step. The sums are not: each step's sums stay readable after the next step is
queued, so the step clock (reprokit/kits/jax_kit/step_clock.py) can wait for that step alone.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

Sums = tuple[jax.Array, jax.Array]


def zero_sums() -> Sums:
    return jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32)


def optimizer(spec_optimizer: Any) -> optax.GradientTransformation:
    """The spec's optimizer in Optax: Adam with its betas and epsilon, or SGD with (Nesterov) momentum. Its
    numeric hyper-parameters live in the optimizer's state (optax.inject_hyperparams: the same update), so the
    certificate can give the kit's own step per-step values and read them back from the state."""
    opt = spec_optimizer
    if opt.name == "adam":
        return optax.inject_hyperparams(optax.adam)(learning_rate=opt.lr, b1=opt.beta1, b2=opt.beta2, eps=opt.epsilon)
    return optax.inject_hyperparams(optax.sgd)(learning_rate=opt.lr, momentum=opt.momentum or None,
                                               nesterov=bool(opt.nesterov))


def inputs(x: jax.Array, scale: float, resize: int | None) -> jax.Array:
    """uint8 NHWC batches to float32, scaled, and resized on the device (half-pixel bilinear, no antialias,
    as torch's interpolate(align_corners=False) and tf.image.resize)."""
    if x.dtype != jnp.uint8:
        return x
    out = x.astype(jnp.float32) * scale
    if resize:
        out = jax.image.resize(out, (out.shape[0], resize, resize, out.shape[3]), "bilinear", antialias=False)
    return out


def cross_entropy(logits: jax.Array, y: jax.Array) -> jax.Array:
    """The batch's mean cross-entropy from logits, in float32 whatever the compute precision."""
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), y).mean()


def _counted(sums: Sums, logits: jax.Array, y: jax.Array, loss: jax.Array) -> Sums:
    correct = jnp.sum(jnp.argmax(logits, axis=1) == y).astype(jnp.int32)
    return sums[0] + loss * y.shape[0], sums[1] + correct


def train_step(graphdef: nnx.GraphDef, scale: float, resize: int | None, outputs: bool) -> Callable[..., Any]:
    """(state, sums, x, y) -> (state, sums[, logits, loss]): one optimizer step in training mode."""
    def step(state: nnx.State, sums: Sums, x: jax.Array, y: jax.Array) -> Any:
        model, opt = nnx.merge(graphdef, state)
        model.train()

        def loss_fn(m: nnx.Module) -> tuple[jax.Array, jax.Array]:
            logits = m(inputs(x, scale, resize))
            return cross_entropy(logits, y), logits

        (loss, logits), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
        opt.update(model, grads)
        new = nnx.state((model, opt))
        counted = _counted(sums, logits, y, loss)
        return (new, counted, logits, loss) if outputs else (new, counted)
    return jax.jit(step, donate_argnums=0)


def eval_step(graphdef: nnx.GraphDef, scale: float, resize: int | None) -> Callable[..., Any]:
    """(state, sums, x, y) -> (sums, logits, loss): the evaluation forward pass; the state is only read."""
    def step(state: nnx.State, sums: Sums, x: jax.Array, y: jax.Array) -> Any:
        model, _ = nnx.merge(graphdef, state)
        model.eval()
        logits = model(inputs(x, scale, resize))
        loss = cross_entropy(logits, y)
        return _counted(sums, logits, y, loss), logits, loss
    return jax.jit(step, donate_argnums=(1,))


def count_step() -> Callable[..., Any]:
    """(sums, logits, y) -> (sums, loss): the kit's count of outputs a user's evaluate hook gave."""
    def count(sums: Sums, logits: jax.Array, y: jax.Array) -> Any:
        loss = cross_entropy(logits, y)
        return _counted(sums, logits, y, loss), loss
    return jax.jit(count, donate_argnums=(0,))


class Compiled:
    """A jitted step compiled ahead of time once per batch shape, each compilation timed.

    The warmup compiles every shape the run will give (see Backend.build): a compilation in a timed
    phase would be counted as training. Where a shape first comes later (a user's input hook), it is
    compiled then, and the record says in which phase.
    """

    def __init__(self, jitted: Callable[..., Any], name: str, record: list[dict[str, Any]],
                 phase: Callable[[], str]) -> None:
        self.jitted, self.name, self.record, self.phase = jitted, name, record, phase
        self._by_shape: dict[tuple[Any, ...], Any] = {}

    def __call__(self, *args: Any) -> Any:
        fn = self._by_shape.get(tuple((a.shape, a.dtype) for a in args[-2:]))
        return (fn or self.compile(*args))(*args)

    def compile(self, *args: Any) -> Any:
        """Compile for these arguments' shapes (arrays or jax.ShapeDtypeStruct), timed."""
        key = tuple((a.shape, a.dtype) for a in args[-2:])
        t0 = time.perf_counter()
        fn = self.jitted.lower(*args).compile()      # type: ignore[attr-defined]
        self._by_shape[key] = fn
        self.record.append({"step": self.name, "batch_shape": list(args[-2].shape), "phase": self.phase(),
                            "seconds": round(time.perf_counter() - t0, 4)})
        return fn

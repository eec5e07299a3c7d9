"""The Flax NNX module a user's JAX script trains, in the certificate's canonical form, as the probe captured it.

The probe (reprokit/kits/jax_kit/probe.py) takes the ``nnx.Module`` the script's first training step receives, before
that step runs; ``Captured`` reads it as the kit's own models are read (reprokit/kits/jax_kit/canonical.py): from the
object itself, never rebuilt from code. "Training mode" is each module's mode as the script trained it (its
BatchNorm's ``use_running_average``, its Dropout's ``deterministic``); the inputs are the PyTorch side's
batch where the model takes that shape, else the first samples of the batch the script's step received.
"""
from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from reprokit.kits.framework_free import certificate as cert
from reprokit.kits.framework_free import parting
from reprokit.kits.framework_free.model_call import ModelCall
from reprokit.kits.jax_kit import layer_settings, trace
from reprokit.kits.jax_kit.canonical import Canonical, modules, read_optimizer, set_mode, wrapped_calls
from reprokit.kits.jax_kit.first_call import replay_calls

_MODES = ("use_running_average", "deterministic")     # what model.train() and model.eval() set


def _leaves(model: nnx.Module) -> dict[int, tuple[str, nnx.Module]]:
    """The model's leaf modules (no module inside them) by id: their path and themselves."""
    return {id(m): (path, m) for path, m in modules(model).items()
            if path and not any(isinstance(c, nnx.Module) for _, c in nnx.iter_children(m))}


@contextlib.contextmanager
def _calls(model: nnx.Module, record: Callable[[str, nnx.Module, Any, Any], None]) -> Iterator[None]:
    """Each call of one of the model's leaf modules reported as (path, module, input, output) while inside. A
    module's ``__call__`` is looked up on its class, so each leaf class's is wrapped, and restored after."""
    leaves = _leaves(model)

    def wrap(call: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(self: nnx.Module, *args: Any, **kwargs: Any) -> Any:
            y = call(self, *args, **kwargs)
            if id(self) in leaves:
                record(leaves[id(self)][0], self, args[0] if args else None, y)
            return y
        return recorded
    with wrapped_calls((type(m) for _, m in leaves.values()), wrap):
        yield


class Captured(Canonical):
    """The script's module, its optimizer (an ``nnx.Optimizer``, or None where its step received none) and the
    certificate's inputs (NHWC, as the model takes them)."""
    traced_in = None                     # the trace runs in the modes the script trained in

    def __init__(self, model: nnx.Module, optimizer: nnx.Optimizer | None, x: np.ndarray, call: ModelCall,
                 expects_logits: bool | None, who: str) -> None:
        self.model, self.who, self.trace, self.call = model, who, None, call
        replay_calls(model, call)
        self.trained_modes = {path: {a: getattr(m, a) for a in _MODES if isinstance(getattr(m, a, None), bool)}
                              for path, m in modules(model).items()}
        self._expects_logits = expects_logits
        self.x_first = np.asarray(x, np.float32)
        self.x_trace = self.x_first[:cert.TRACE_BATCH]
        self._canonical()
        self.optimizer = (read_optimizer(optimizer.tx, optimizer.opt_state) if optimizer is not None else
                          {"class": "not read: the training step received no nnx.Optimizer", "name": None})

    def _set_mode(self, training: bool, dropout: bool) -> None:
        """Training: each module's mode as the script trained it (dropout off where asked); else evaluation."""
        if not training:
            set_mode(self.model, False, dropout=False)
            return
        for path, m in modules(self.model).items():
            for attr, value in self.trained_modes.get(path, {}).items():
                setattr(m, attr, value)
            if not dropout and isinstance(m, nnx.Dropout):
                m.deterministic = True

    def _inputs(self, x: np.ndarray) -> jax.Array:
        return jnp.asarray(x, self.dtype)

    def expects_logits(self) -> bool | None:
        return self._expects_logits

    def environment(self) -> dict[str, Any]:
        device = next(iter(jax.tree.leaves(nnx.state(self.model, nnx.Param))[0].devices()))
        return {"framework": "jax", "framework_version": jax.__version__, "python": platform.python_version(),
                "numpy": np.__version__, "device": device.platform,
                "cpu_threads": {"xla_flags": os.environ.get("XLA_FLAGS", "")}}

    def _in_eval(self) -> list[str]:
        """The modules that act otherwise in training that the script trained in evaluation mode."""
        return [f"{path} ({type(m).__name__})" for path, m in modules(self.model).items()
                if (isinstance(m, nnx.BatchNorm) and self.trained_modes[path].get("use_running_average"))
                or (isinstance(m, nnx.Dropout) and self.trained_modes[path].get("deterministic"))]

    def modes(self) -> dict[str, Any]:
        """Where the script trained a BatchNorm or a Dropout in evaluation mode: the trace of the model as built
        (every module in training mode; the trace runs on a copy of its state) beside it."""
        off = self._in_eval()
        if not off:
            return {"in_eval": [], "ops_as_built": None}
        return {"in_eval": off, "ops_as_built": trace.trace(self.model, self._inputs(self.x_trace), training=True).ops}

    def shared(self) -> list[str]:
        """Leaf modules with weights that one forward pass calls at more than one place."""
        counts: dict[str, int] = {}

        def count(path: str, m: nnx.Module, _x: Any, _y: Any) -> None:
            if nnx.state(m, nnx.Param):
                counts[f"{path} ({type(m).__name__})"] = counts.get(f"{path} ({type(m).__name__})", 0) + 1
        self._set_mode(False, dropout=False)
        with _calls(self.model, count):
            self.model(self._inputs(self.x_trace))
        return [f"{name} at {n} places" for name, n in counts.items() if n > 1]

    def layer_outputs(self, x: np.ndarray, training: bool) -> list[tuple[dict[str, Any], np.ndarray]]:
        """Every leaf module's output in call order (an nnx.Sequential's functions too), dropout off, with its
        settings (reprokit/kits/framework_free/parting.py): NHWC, and a flatten's rows in (h, w, c) order, are canonical
        already. A training-mode pass updates BatchNorm's running statistics: the caller loads the weights again."""
        if isinstance(self.model, nnx.Sequential):
            return super().layer_outputs(x, training)
        out: list[tuple[dict[str, Any], np.ndarray]] = []

        def record(path: str, m: nnx.Module, x_in: Any, y: Any) -> None:
            if not hasattr(y, "shape") or not hasattr(x_in, "shape"):
                return
            family, settings = layer_settings.read(m, [int(s) for s in x_in.shape])
            out.append((parting.entry(path, type(m).__name__, family, settings, y.shape), np.asarray(y, np.float64)))
        self._set_mode(training, dropout=False)
        with _calls(self.model, record):
            self.model(self._inputs(x))
        return out

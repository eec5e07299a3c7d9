"""The JAX half of the equivalence certificate: the kit's own model and step, in canonical form.

The model, optimizer, loss and input preprocessing are the Backend's, built from the spec exactly as a
training run builds them; ``nnx.merge`` of the Backend's state gives the objects the certificate reads
and writes (reprokit/kits/jax_kit/canonical.py). The kit's own fp32 steps are the Backend's jitted train_step,
recompiled once from a graph whose dropout rates are zero (Flax keeps a rate in the graph, not the
state); the certified fp64 trajectory is the same model, loss and optax transform in float64
(``jax_enable_x64``, in this process only).
"""
from __future__ import annotations

import math
import os
import platform
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from reprokit.kits.framework_free import certificate as cert
from reprokit.kits.jax_kit import conventions, steps
from reprokit.kits.jax_kit import trace as tracing
from reprokit.kits.jax_kit.backend import Backend
from reprokit.kits.jax_kit.canonical import Canonical, modules, read_optimizer, set_mode

X64_UNAVAILABLE = ("JAX gives back {dtype} arrays where float64 was asked for on this device ({device}): the "
                   "certificate's fp64 trajectory needs jax_enable_x64; certify on a CPU, or on a device with "
                   "64-bit floats")


def require_float64(array: Any, device: str) -> None:
    """One sentence where the device gave back a narrower float than float64 (x64 unavailable)."""
    if array.dtype != np.float64:
        raise cert.InputError(X64_UNAVAILABLE.format(dtype=array.dtype, device=device))


def _hyperparameters(opt: dict[str, Any], t: int) -> dict[str, float]:
    """Optax's hyper-parameters for step t, those the PyTorch side uses at step t: PyTorch sets its own to
    Keras 3's form for every pair, and optax.adam and optax.sgd have torch.optim's forms, so the same
    values give the same update."""
    values = cert.torch_hyperparameters_like_keras(opt, t)
    return {{"lr": "learning_rate"}.get(k, k): v for k, v in values.items()}


def _set_hyperparameters(opt_state: Any, values: dict[str, float]) -> bool:
    """Write per-step values into an optax.inject_hyperparams state; False where the state has none."""
    hyper = getattr(opt_state, "hyperparams", None)
    if not isinstance(hyper, dict):
        return False
    for key, value in values.items():
        if key in hyper:
            var = hyper[key]
            var.set_value(jnp.asarray(value, var.get_value().dtype))
    return True


def _cross_entropy(logits: jax.Array, y: jax.Array) -> jax.Array:
    """The kit's loss in the model's own precision (the kit's casts to float32, which fp64 must not)."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


# The reference passes run op by op (not jitted): a few steps per certificate, where a compiled graph costs
# seconds per model and each primitive is compiled once per shape for every pair; the kit's own step is jitted.
def _reference_step(graphdef: Any, state: Any, x: jax.Array, y: jax.Array) -> Any:
    """One step of (model, optimizer) in the model's dtype."""
    model, opt = nnx.merge(graphdef, state)
    loss, grads = nnx.value_and_grad(lambda m: _cross_entropy(m(x), y))(model)
    opt.update(model, grads)
    return loss, grads, nnx.state((model, opt))


def _loss(graphdef: Any, state: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    return _cross_entropy(nnx.merge(graphdef, state)(x), y)


# the kit's step by graph: compiled once per process and batch shape
_KIT_STEPS: dict[tuple[Any, ...], steps.Compiled] = {}


class Certifier(Canonical, cert.Side):
    framework = "jax"
    backend_class = Backend

    def _build(self) -> None:
        """Build the kit's model and optimizer (again); the first build is traced."""
        self.backend.build(self.arrays)
        self.model, self.kit_optimizer = nnx.merge(self.backend.graphdef, self.backend.state)
        if getattr(self, "_float64", False):
            for _, v in nnx.iter_graph(self.model):
                if isinstance(v, (nnx.Param, nnx.BatchStat)):
                    v.set_value(v.get_value().astype(jnp.float64))
        self._steps = 0
        self._reference: nnx.Optimizer | None = None
        self._canonical()

    def use_float64(self) -> None:
        """The same model, from the same builder, in float64, with jax_enable_x64 on (until reset())."""
        jax.config.update("jax_enable_x64", True)
        require_float64(jnp.zeros(1, jnp.float64), self.backend.device.platform)
        self._float64 = True
        self._build()
        if self.dtype != jnp.float64:
            raise RuntimeError(f"the float64 rebuild of the JAX model has {self.dtype} weights")

    def _read_optimizer(self) -> dict:
        return read_optimizer(self.kit_optimizer.tx, self.kit_optimizer.opt_state)

    def _inputs(self, x: np.ndarray) -> jax.Array:
        """fp32: the kit's own preprocessing on the device; fp64:
        reprokit.kits.framework_free.certificate.preprocess64."""
        if getattr(self, "dtype", jnp.float32) == jnp.float64:
            return jax.device_put(cert.preprocess64(x, self.backend.scale, self.backend.resize), self.backend.device)
        return steps.inputs(jax.device_put(x, self.backend.device), self.backend.scale, self.backend.resize)

    # -- what is compared ------------------------------------------------------------------------
    def environment(self) -> dict:
        return {"framework": "jax", "framework_version": jax.__version__, "python": platform.python_version(),
                "numpy": np.__version__, "device": self.backend.device.platform,
                "cpu_threads": {"xla_flags": os.environ.get("XLA_FLAGS", "")},
                "conventions": conventions.declared(self.spec.to_dict())}

    def expects_logits(self) -> bool:
        return True                   # the kit's loss is optax.softmax_cross_entropy_with_integer_labels

    def neutralisable(self) -> list[dict]:
        opt = self.optimizer
        if opt["name"] != "adam" and not opt.get("momentum"):
            return []
        names = "learning rate and epsilon" if opt["name"] == "adam" else "momentum"
        return [{"field": "the reference's per-step hyper-parameters", "declared": False,
                 "how": f"the PyTorch side sets its {names} step by step to Keras 3's form whatever the pair; "
                        f"optax.{opt['name']} has torch.optim's form, so the JAX side takes the same per-step "
                        f"values (optax.inject_hyperparams) in the fp64 and fp32 reference steps and, where the "
                        f"kit's transform carries them, in the kit's own steps"}]

    def _kit_without_dropout(self) -> None:
        """The Backend's own jitted train_step, compiled for the same model with every dropout rate zero."""
        for m in modules(self.model).values():
            if isinstance(m, nnx.Dropout):
                m.rate = 0.0
        backend = self.backend
        backend.graphdef, state = nnx.split((self.model, self.kit_optimizer))
        backend.state = jax.tree.map(jnp.copy, state)      # the step donates it: the model keeps its own
        key = (backend.graphdef, backend.scale, backend.resize, backend.metrics_hook is not None)
        if key not in _KIT_STEPS:
            _KIT_STEPS[key] = steps.Compiled(steps.train_step(*key[:3], outputs=key[3]), "train",
                                             backend.compilation, backend._phase)
        backend._train = _KIT_STEPS[key]
        backend._train_sizes = []           # compiled for the certificate's batches as they come, not the run's

    def kit_train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]], perturb: bool = False) -> list[float]:
        """The kit's own train_step (fp32) on each batch, from the weights loaded now; with ``perturb``, the
        kit's preprocessed inputs moved one float32 ulp up."""
        self._kit_without_dropout()
        device = []
        for x, y in batches:
            xb, yb = self.backend._to_device(x, y)
            if perturb:
                xf = steps.inputs(xb, self.backend.scale, self.backend.resize)
                xb = jnp.nextafter(xf, jnp.full_like(xf, math.inf))
            device.append(((xb, yb), len(y)))

        def before(t: int) -> None:
            model, opt = nnx.merge(self.backend.graphdef, self.backend.state)
            if _set_hyperparameters(opt.opt_state, _hyperparameters(self.optimizer, t)):
                self.backend.state = nnx.state((model, opt))
        return cert.kit_train_losses(self.backend, device, before_step=before)

    def _reference_optimizer(self) -> nnx.Optimizer:
        opt = self.optimizer
        if opt["name"] == "adam":
            tx = optax.inject_hyperparams(optax.adam)(learning_rate=opt["lr"], b1=opt["beta1"], b2=opt["beta2"],
                                                      eps=opt["epsilon"])
        else:
            tx = optax.inject_hyperparams(optax.sgd)(learning_rate=opt["lr"], momentum=opt.get("momentum") or None,
                                                     nesterov=bool(opt.get("nesterov")))
        return nnx.Optimizer(self.model, tx, wrt=nnx.Param)

    def train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]],
                     gradients: list[dict[str, np.ndarray]] | None = None) -> list[float]:
        """The reference step in the model's dtype: cross-entropy of the logits, gradients, the optax update,
        training mode with dropout off; each step's canonical gradients appended to ``gradients``."""
        if self._reference is None:
            self._reference = self._reference_optimizer()
        set_mode(self.model, True, dropout=False)
        by_path = {p.path: p for p in self.params}
        losses = []
        for x, y in batches:
            self._steps += 1
            _set_hyperparameters(self._reference.opt_state, _hyperparameters(self.optimizer, self._steps))
            graphdef, state = nnx.split((self.model, self._reference))
            loss, grads, state = _reference_step(graphdef, state, self._inputs(x), jnp.asarray(y))
            nnx.update((self.model, self._reference), state)
            if gradients is not None:
                flat = {tracing.path_name(k): g for k, g in jax.tree_util.tree_flatten_with_path(grads)[0]}
                gradients.append({by_path[k].record["name"]: by_path[k].to_canonical(np.asarray(g, np.float64))
                                  for k, g in flat.items() if k in by_path})
            losses.append(float(loss))
        return losses

    def training_loss(self, x: np.ndarray, y: np.ndarray) -> float:
        """The loss of a batch in training mode (batch statistics) without an update."""
        set_mode(self.model, True, dropout=False)
        graphdef, state = nnx.split(self.model)
        return float(_loss(graphdef, state, self._inputs(x), jnp.asarray(y)))

    def reset(self) -> None:
        """Leave nothing behind for the next certificate in this process."""
        jax.config.update("jax_enable_x64", False)

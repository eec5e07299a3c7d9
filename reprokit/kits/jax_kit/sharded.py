"""A JAX kit run at N devices: one process, a ``jax.sharding.Mesh`` of N devices with one axis, "data", each global
batch split on it (reprokit/kits/training_loop/distributed.py says what the three kits share at N).

The train step is a per-device step under ``jax.shard_map``: the train state replicated (P()), the global batch
sharded (P("data"): the mesh's d-th device takes the d-th contiguous share). On its own share each device runs the
model in training mode and differentiates the share's mean cross-entropy; the devices' gradients are averaged
(``jax.lax.pmean``) before the optimizer's update, so every device makes the same update. (The parameters are
marked as differing between devices for the differentiation alone: JAX differentiates a replicated value by summing
the devices' gradients itself, which would add, not average, them.) BatchNorm normalises with
each device's own batch statistics; its running statistics are averaged after the update, so the replicated state
stays one state. Each device draws its own dropout masks: its index on the axis is folded into the dropout keys for
the step, and the keys are put back after it. The kit's loss sum and correct count are added over the devices
(``jax.lax.psum``). Evaluation runs unsharded: each evaluation batch replicated, the replicated model applied whole.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.jax_kit import steps
from reprokit.kits.training_loop import distributed

AXIS = "data"


def devices(spec: RunSpec, pool: list[Any]) -> list[Any]:
    """The run's N devices, the first N JAX lists of the run's kind; one sentence where it sees fewer."""
    n = spec.devices
    if len(pool) < n:
        kind = "GPU" if spec.device == "gpu" else "CPU"
        raise RuntimeError(f"the run at {n} devices sees {len(pool)} JAX {kind} device{'s' * (len(pool) != 1)} "
                           f"({', '.join(str(d) for d in pool)}), fewer than the {n} its mesh needs")
    return pool[:n]


def refused(spec: RunSpec, input_hook: Any, train_sizes: list[int]) -> None:
    """What the kit's mesh does not split, in one sentence: a user's input hook's own batches, or a training batch
    that does not divide evenly over the devices."""
    n = spec.devices
    if input_hook:
        raise RuntimeError(f"a run at {n} devices splits the kit's own batches over its mesh; the user's input hook "
                           f"{input_hook.ref} feeds batches of its own, which the mesh would not split: run it at "
                           f"one device")
    uneven = [size for size in train_sizes if size % n]
    if uneven:
        raise RuntimeError(f"a run at {n} devices splits each training batch evenly over them, and a batch of "
                           f"{uneven[0]} samples does not divide by {n}: drop the partial last batch "
                           f"(data.drop_last = true) or pick a batch size and sample count that divide")


def batchnorm(model: nnx.Module) -> str | None:
    """The model's BatchNorm at N, read from its layers: per device, unless a layer averages its batch statistics
    over the mesh's axis itself (``axis_name="data"``); None without BatchNorm."""
    norms = [m for _, m in nnx.iter_graph(model) if isinstance(m, nnx.BatchNorm)]
    synced = sum(m.axis_name == AXIS for m in norms)
    return (None if not norms else distributed.SYNCHRONIZED if synced == len(norms)
            else distributed.PER_DEVICE if not synced else "mixed")


def _varying(leaf: Any) -> bool:
    """Does this traced value differ between the mesh's devices (JAX's type of a value inside shard_map)?"""
    manual = getattr(jax.typeof(leaf), "manual_axis_type", None)
    return AXIS in getattr(manual, "varying", ())


def _kept_replicated(state: nnx.State, n: int) -> None:
    """One sentence where a variable other than those the step keeps one (parameters, optimizer state, BatchNorm's
    statistics, dropout keys) differs between the devices after the step: the state is replicated."""
    for path, variable in nnx.to_flat_state(state):           # paths from (model, optimizer)
        if any(_varying(leaf) for leaf in jax.tree.leaves(variable)):
            owner = "model" if path[0] == 0 else "optimizer"
            raise RuntimeError(f"the {owner}'s {type(variable).__name__} {'.'.join(map(str, path[1:]))} differs "
                               f"between the {n} devices after a step (the kit keeps parameters, BatchNorm statistics "
                               f"and dropout keys one replicated state, no other variable): run it at one device")


def train_step(graphdef: nnx.GraphDef, scale: float, resize: int | None, mesh: Mesh) -> Callable[..., Any]:
    """(state, sums, x, y) -> (state, sums, logits, loss, differentiated): one optimizer step over the mesh; the
    logits sharded as the batch, ``loss`` the global batch's mean, ``differentiated`` each device's loss (N,)."""
    def local(state: nnx.State, sums: steps.Sums, x: jax.Array, y: jax.Array) -> Any:
        model, opt = nnx.merge(graphdef, state)
        model.train()
        keys = jax.tree.map(lambda k: k, nnx.state(model, nnx.RngKey))     # a copy: the state holds the variables
        device = jax.lax.axis_index(AXIS)
        nnx.update(model, jax.tree.map(lambda k: jax.random.fold_in(k, device), keys))

        def loss_fn(m: nnx.Module) -> tuple[jax.Array, jax.Array]:
            logits = m(steps.inputs(x, scale, resize))
            return steps.cross_entropy(logits, y), logits

        # Each device's own gradients: the parameters it differentiates marked as differing between devices (else
        # JAX's differentiation of replicated values sums the devices' gradients itself), then averaged.
        params = jax.tree.map(lambda p: p, nnx.state(model, nnx.Param))
        nnx.update(model, jax.lax.pcast(params, AXIS, to="varying"))
        (loss, logits), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
        nnx.update(model, params)
        opt.update(model, jax.lax.pmean(grads, AXIS))
        nnx.update(model, keys)                 # the replicated keys back: the fold was for this step's masks
        nnx.update(model, jax.lax.pmean(nnx.state(model, nnx.BatchStat), AXIS))
        new = nnx.state((model, opt))
        _kept_replicated(new, mesh.size)
        correct = jnp.sum(jnp.argmax(logits, axis=1) == y).astype(jnp.int32)
        loss_sum, correct = jax.lax.psum((loss * y.shape[0], correct), AXIS)
        return new, (sums[0] + loss_sum, sums[1] + correct), logits, jax.lax.pmean(loss, AXIS), loss[None]

    replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))
    per_device = jax.shard_map(local, mesh=mesh, in_specs=(P(), P(), P(AXIS), P(AXIS)),
                               out_specs=(P(), P(), P(AXIS), P(), P(AXIS)))
    return jax.jit(per_device, donate_argnums=0, in_shardings=(replicated, replicated, split, split),
                   out_shardings=(replicated, replicated, split, replicated, split))


class Devices:
    """The run's mesh, how batches and the state go onto it, and what its first step showed."""

    def __init__(self, spec: RunSpec, pool: list[Any]) -> None:
        self.n = spec.devices
        self.global_batch = spec.train.batch_size
        self.devices = devices(spec, pool)
        self.mesh = Mesh(np.array(self.devices), (AXIS,))
        self.replicated = NamedSharding(self.mesh, P())
        self.split = NamedSharding(self.mesh, P(AXIS))
        self._evidence: dict[str, Any] | None = None
        self._batchnorm: str | None = None

    def train_put(self, x: Any, y: Any) -> tuple[jax.Array, jax.Array]:
        """A global training batch, each device its contiguous share (jax.device_put returns at once)."""
        return jax.device_put(x, self.split), jax.device_put(y, self.split)

    def eval_put(self, x: Any, y: Any) -> tuple[jax.Array, jax.Array]:
        """An evaluation batch, whole on every device: the replicated model evaluates it unsharded."""
        return jax.device_put(x, self.replicated), jax.device_put(y, self.replicated)

    def replicate(self, tree: Any) -> Any:
        return jax.device_put(tree, self.replicated)

    def zero_sums(self) -> steps.Sums:
        sums: steps.Sums = self.replicate(steps.zero_sums())
        return sums

    def built(self, model: nnx.Module) -> None:
        self._batchnorm = batchnorm(model)

    def _on_first(self, a: jax.Array) -> np.ndarray:
        """The share of a sharded array on the mesh's first device."""
        first = self.devices[0]
        return np.asarray(next(s.data for s in a.addressable_shards if s.device == first))

    def first_step(self, x: jax.Array, y: jax.Array, out: Any) -> None:
        """Once, at the first training step (in the warmup): the evidence the certificate at N compares, from the
        values the step computed (the one read back of the run's training steps)."""
        logits = self._on_first(out[2]).astype(np.float64)
        labels = self._on_first(y)
        top = logits.max(axis=1)
        log_z = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
        own = float((log_z - logits[np.arange(len(labels)), labels]).mean())
        differentiated = float(self._on_first(out[4])[0])
        self._evidence = distributed.evidence(
            "process", 0, int(x.shape[0]), self.n, distributed.fingerprints(np.asarray(x)), differentiated, own, 1,
            True, self._batchnorm, "device 0's differentiated loss over its share's mean loss")

    def how(self) -> str:
        per = self.global_batch // self.n
        return (f"a jax.sharding.Mesh of {self.n} devices on its \"data\" axis, each device a contiguous {per} of "
                f"each global batch of {self.global_batch} (P(\"data\")), a per-device step under jax.shard_map: "
                f"its share's mean cross-entropy, the gradients averaged by jax.lax.pmean, BatchNorm's batch "
                f"statistics per device and its running statistics pmean'ed after the update, each device its own "
                f"dropout masks (jax.lax.axis_index(\"data\") folded into the dropout keys)")

    def at_n(self) -> dict[str, Any]:
        return {"how": self.how(), "replicas": self.n, "evidence": [self._evidence] if self._evidence else []}

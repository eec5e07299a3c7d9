"""The TensorFlow kit at N devices (a spec's ``devices``): one process, ``tf.distribute.MirroredStrategy`` over its N
devices, as TensorFlow's custom-training-loop guide does it (reprokit/kits/training_loop/distributed.py).

Each global batch the kit's feeder yields is split into N contiguous shares by the strategy's distributed values
(``experimental_distribute_values_from_function``); ``strategy.run`` runs the replica step on each share; each
replica's per-sample losses are scaled by the global batch (``tf.nn.compute_average_loss``), and the Keras optimizer
sums the replicas' gradients before it updates the mirrored variables. The kit's loss and correct sums are each
replica's, added. BatchNorm normalises with each device's own batch statistics (Keras's ``synchronized=False``);
its moving statistics are each device's own, and an evaluation, which runs unsharded on the mirrored model, reads
the first device's.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from reprokit.kits.contract.pitfalls import Pitfall
from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.training_loop import distributed

SUM = tf.distribute.ReduceOp.SUM


@functools.cache
def strategy() -> tf.distribute.MirroredStrategy:
    """The process's one MirroredStrategy: the strategies of one process share the collectives' instance keys, so a
    second one (the bench's next model, its bare loop) would meet the first's reductions of other shapes."""
    return tf.distribute.MirroredStrategy()


class Mirrored:
    """The strategy, its split of each global batch, its step, and the first step's evidence."""

    def __init__(self, spec: RunSpec) -> None:
        n = self.n = spec.devices
        if spec.pitfalls.has(Pitfall.TF_BATCH_OF_ONE):
            raise RuntimeError(f"the posted batches of one (pitfall {Pitfall.TF_BATCH_OF_ONE.value}) cannot be split "
                               f"among {n} devices: run that spec at one device")
        if spec.numerics.compile:
            raise RuntimeError(f"numerics.compile cannot run at {n} devices: XLA cannot compile a MirroredStrategy "
                               f"step whose mirrored variables sit on {n} devices, so run it with compile off or at "
                               f"one device")
        self.strategy = strategy()
        devices = self.strategy.extended.worker_devices
        if self.strategy.num_replicas_in_sync != n:
            names = ", ".join(d.rsplit("device:", 1)[-1] for d in devices)
            raise RuntimeError(f"the spec asks for {n} devices but tf.distribute.MirroredStrategy() mirrors "
                               f"{len(devices)} ({names}): on a CPU set {n} stand-in devices before TensorFlow "
                               f"starts (reprokit/kits/devices/stand_ins.py), on a GPU give the process {n} GPUs")
        gpus = all("GPU" in d.upper() for d in devices)
        self.devices_named = f"{n} GPUs" if gpus else f"{n} logical CPU devices"
        self._evidence: dict[str, Any] | None = None
        self._global_batch = 0

    def scope(self) -> Any:
        return self.strategy.scope()

    def split(self, x: tf.Tensor, y: tf.Tensor) -> tuple[Any, Any]:
        """The global batch as N contiguous shares, one a replica (as experimental_distribute_dataset splits a
        batch), cut on the host: each replica's step copies its own share to its device."""
        total, n = int(x.shape[0]), self.n
        if total < n:
            raise RuntimeError(f"a training batch of {total} samples cannot be split among {n} devices (each needs "
                               f"at least one): drop the last partial batch (data.drop_last) or use fewer devices")

        def share(ctx: tf.distribute.experimental.ValueContext) -> tuple[tf.Tensor, tf.Tensor]:
            i = ctx.replica_id_in_sync_group
            lo, hi = total * i // n, total * (i + 1) // n
            with tf.device("/cpu:0"):
                return x[lo:hi], y[lo:hi]

        shares: tuple[Any, Any] = self.strategy.experimental_distribute_values_from_function(share)
        return shares

    def step(self, kit: Any) -> Callable[..., Any]:
        """The kit's training step over the replicas, for its tf.function: the global batch's mean loss, the
        gathered outputs where the user's metrics hook reads them (else None), and replica 0's two losses."""
        strategy = self.strategy
        per_sample_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=kit.loss_fn.from_logits,
                                                                     reduction=None)

        def replica_step(x: tf.Tensor, y: tf.Tensor, total: tf.Tensor) -> tuple[tf.Tensor, ...]:
            with tf.GradientTape() as tape:
                logits = tf.cast(kit.model(kit._inputs(x), training=True), tf.float32)
                per_sample = per_sample_loss(y, logits)
                loss = tf.nn.compute_average_loss(per_sample, global_batch_size=total)
                scaled = kit.optimizer.scale_loss(loss)      # the loss itself but under a LossScaleOptimizer
            grads = tape.gradient(scaled, kit.model.trainable_variables)
            kit.optimizer.apply_gradients(zip(grads, kit.model.trainable_variables))    # summed over the replicas
            loss_sum = tf.reduce_sum(per_sample)
            correct = tf.reduce_sum(tf.cast(tf.argmax(logits, 1) == y, tf.int64))
            own_mean = loss_sum / tf.cast(tf.shape(y)[0], tf.float32)
            return logits, loss, own_mean, loss_sum, correct

        def train_step(x: Any, y: Any) -> tuple[Any, ...]:
            total = tf.add_n([tf.shape(share)[0] for share in strategy.experimental_local_results(y)])
            logits, loss, own_mean, loss_sum, correct = strategy.run(replica_step, args=(x, y, total))
            kit._loss_sum.assign_add(strategy.reduce(SUM, loss_sum, axis=None))
            kit._correct.assign_add(strategy.reduce(SUM, correct, axis=None))
            outputs = strategy.gather(logits, axis=0) if kit.metrics_hook else None
            return outputs, strategy.reduce(SUM, loss, axis=None), (loss, own_mean)

        return train_step

    def train(self, step: Callable[..., Any], x: tf.Tensor, y: tf.Tensor) -> tuple[Any, tf.Tensor]:
        """One step on the global batch (x, y); the first one's evidence kept (read back once)."""
        outputs, loss, (differentiated, own_mean) = step(*self.split(x, y))
        if self._evidence is None:
            first = self.strategy.experimental_local_results
            self._global_batch = int(x.shape[0])
            self._evidence = {"samples": distributed.fingerprints(x.numpy()),
                              "differentiated": float(first(differentiated)[0].numpy()),
                              "own_mean": float(first(own_mean)[0].numpy())}
        return outputs, loss

    def at_n(self, model: keras.Model) -> dict[str, Any] | None:
        """How the run split its steps and this process's first-step evidence (None before a step)."""
        if self._evidence is None:
            return None
        n, batch = self.n, self._global_batch
        how = (f"tf.distribute.MirroredStrategy over {n} replicas ({self.devices_named}), each global batch split in "
               f"{n} contiguous shares by its experimental_distribute_values_from_function, each replica's loss scaled "
               f"by the global batch {batch} (tf.nn.compute_average_loss)")
        scaled = f"tf.nn.compute_average_loss: each replica's summed loss divided by the global batch {batch}"
        return {"how": how, "replicas": n,
                "evidence": [distributed.evidence("process", 0, batch, n, self._evidence["samples"],
                                                  self._evidence["differentiated"], self._evidence["own_mean"],
                                                  summed=self.strategy.num_replicas_in_sync, averaged=False,
                                                  batchnorm=batchnorm(model), how=scaled)]}


def batchnorm(model: keras.Model) -> str | None:
    """How the model's BatchNorm layers take their batch statistics at N: synchronized only where every one is."""
    norms = [layer for layer in model._flatten_layers(include_self=False)
             if isinstance(layer, keras.layers.BatchNormalization)]
    if not norms:
        return None
    return distributed.SYNCHRONIZED if all(layer.synchronized for layer in norms) else distributed.PER_DEVICE

"""How a TensorFlow step scales its loss: the loss it differentiates against its batch's mean loss, and how its
replicas' gradients add up.

Under ``tf.distribute`` each replica computes the gradient of the loss it differentiates on its share of the
batch, and the optimizer sums the replicas' gradients. The step's gradient is the gradient of the mean loss over
the global batch (what one device computes on that batch) where each replica differentiates its batch's mean loss
divided by the replicas (``tf.nn.compute_average_loss`` with the global batch, or Keras fit); a replica that
differentiates its own batch's mean (``reduce_mean``) makes the step take N times that gradient.

The hooks read it from what the step computes, per replica: ``GradientTape.gradient``'s target (the loss
differentiated) and the mean loss over the replica's batch of the Keras loss it called (``keras.losses.Loss``,
whatever its reduction); at the optimizer's update, their ratio and the replicas it sums over are written to a
variable, read once the run is over (``report``): ``factor`` = ratio x replicas is the step's gradient over the
gradient at one device on the same global batch.
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf


class LossScale:
    def __init__(self) -> None:
        with tf.device("/CPU:0"):
            self.value = tf.Variable(tf.zeros(2, tf.float64), trainable=False)   # [ratio, replicas summed]
        self._target: Any = None
        self._mean: Any = None
        self.seen = False

    def mean_loss(self, out: Any, n: Any, reduction: str | None) -> Any:
        """The mean over the batch of a Keras loss's output, whatever its reduction. A mean reduction under a
        strategy of N replicas returns the mean over N (Keras's scale_loss_for_distribution, so that the replicas'
        summed gradients make the mean's): the mean is that times N."""
        if len(out.shape) == 1:                          # reduction None: one loss per sample
            return tf.reduce_mean(out)
        if reduction == "sum":
            return out / tf.cast(n, out.dtype)
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return out * replicas if replicas > 1 else out

    def loss(self, mean: Any) -> None:
        self._mean = mean

    def target(self, target: Any) -> None:
        if tf.is_tensor(target) and len(target.shape) == 0:
            self._target = target

    def update(self) -> None:
        """At the optimizer's update: the ratio of the loss differentiated to the mean loss, and the replicas whose
        gradients the update sums (one outside a strategy's replica context)."""
        if self._target is None or self._mean is None:
            return
        replicas = 1
        if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
            replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        ratio = tf.cast(self._target, tf.float64) / tf.cast(self._mean, tf.float64)
        self.value.assign(tf.stack([ratio, tf.constant(float(replicas), tf.float64)]))
        self.seen = True
        self._target = self._mean = None

    def report(self) -> dict[str, Any] | None:
        if not self.seen:
            return None
        ratio, replicas = (float(v) for v in self.value.numpy())
        return {"per_replica": ratio, "replicas_summed": int(replicas), "factor": ratio * replicas,
                "how": "the loss each replica differentiated (GradientTape.gradient's target) over the mean loss of "
                       "its batch (its Keras loss), times the replicas whose gradients the optimizer sums: the step's "
                       "gradient over one device's on the same global batch"}


def install(probe: Any) -> None:
    """GradientTape.gradient reports its target to ``probe.loss_scale``."""
    real = tf.GradientTape.gradient

    def gradient(tape: tf.GradientTape, target: Any, *args: Any, **kwargs: Any) -> Any:
        if not probe.certifying:
            probe.loss_scale.target(target)
        return real(tape, target, *args, **kwargs)
    tf.GradientTape.gradient = gradient

"""The bench's bare TensorFlow loop, the reference the kit's own loop is judged against (reprokit/kits/bench.py)."""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from reprokit.kits.contract.spec import FRAMEWORK_DEFAULT, RunSpec
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.training_loop import bare


def loop(spec: RunSpec, arrays: datalib.Arrays, warmup: int, steps: int) -> tuple[float, float]:
    """Wall and process CPU seconds for `steps` steps after `warmup`: a tf.function step with a tape (at N devices
    MirroredStrategy's custom loop, _mirrored)."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(spec.train.seed)
    if spec.devices > 1:
        return _mirrored(spec, arrays, warmup, steps)
    scale, resize = bare.scale_resize(spec)
    model, optimizer = _model(spec)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        x = tf.cast(x, tf.float32) * scale
        if resize:
            x = tf.image.resize(x, (resize, resize), method="bilinear", antialias=False)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    staged = [(tf.constant(arrays.x_train[idx]), tf.constant(arrays.y_train[idx]))     # as for PyTorch above
              for idx in bare.schedule(spec, arrays, warmup, steps)]
    return _timed(train_step, staged, warmup)


def _model(spec: RunSpec) -> tuple[Any, Any]:
    import keras

    from reprokit.kits.tensorflow_kit import models

    model = models.build(spec.model, spec.data.input_size)
    opt = spec.train.optimizer
    if opt.name == "adam":
        optimizer = keras.optimizers.Adam(learning_rate=opt.lr, beta_1=opt.beta1, beta_2=opt.beta2,
                                          epsilon=opt.epsilon)
    else:
        optimizer = keras.optimizers.SGD(learning_rate=opt.lr, momentum=opt.momentum,
                                         nesterov=opt.nesterov)
    optimizer.build(model.trainable_variables)       # its slots before the trace, as the kit builds them
    return model, optimizer


def _mirrored(spec: RunSpec, arrays: datalib.Arrays, warmup: int, steps: int) -> tuple[float, float]:
    """TensorFlow's custom training loop at N devices: MirroredStrategy, the model and optimizer built in its
    scope, each global batch split among the replicas by its distributed values (staged on their devices before
    the clock starts, as above), each replica's per-sample losses scaled by the global batch."""
    import keras
    import tensorflow as tf

    from reprokit.kits.tensorflow_kit import mirrored

    strategy = mirrored.strategy()
    n = strategy.num_replicas_in_sync
    if n != spec.devices:
        raise RuntimeError(f"the bench asks for {spec.devices} devices but MirroredStrategy() mirrors {n}")
    scale, resize = bare.scale_resize(spec)
    with strategy.scope():
        model, optimizer = _model(spec)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def replica_step(x: tf.Tensor, y: tf.Tensor, total: tf.Tensor) -> tf.Tensor:
        x = tf.cast(x, tf.float32) * scale
        if resize:
            x = tf.image.resize(x, (resize, resize), method="bilinear", antialias=False)
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)), global_batch_size=total)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))      # summed over the replicas
        return loss

    @tf.function
    def train_step(x: Any, y: Any, total: tf.Tensor) -> tf.Tensor:
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(x, y, total)), axis=None)

    def distributed(idx: np.ndarray) -> tuple[Any, ...]:
        def share(ctx: tf.distribute.experimental.ValueContext) -> tuple[tf.Tensor, tf.Tensor]:
            i = ctx.replica_id_in_sync_group
            part = idx[len(idx) * i // n:len(idx) * (i + 1) // n]
            with tf.device(strategy.extended.worker_devices[i]):
                return tf.constant(arrays.x_train[part]), tf.constant(arrays.y_train[part])
        return (*strategy.experimental_distribute_values_from_function(share), tf.constant(len(idx)))

    return _timed(train_step, [distributed(idx) for idx in bare.schedule(spec, arrays, warmup, steps)], warmup)


def _timed(train_step: Callable[..., Any], staged: list[tuple[Any, ...]], warmup: int) -> tuple[float, float]:
    t0 = c0 = 0.0
    loss: Any = None
    for i, batch in enumerate(staged):
        if i == warmup:
            if loss is not None:
                loss.numpy()              # the warmup's last step has finished
            t0, c0 = time.perf_counter(), time.process_time()
        loss = train_step(*batch)
    loss.numpy()                          # steps chain through the variables: the last one done means all
    return time.perf_counter() - t0, time.process_time() - c0


def process_setup(spec: RunSpec) -> None:
    """Thread pools before the first op, as the kit's Backend sets them (it may repeat the same values)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    threads = spec.numerics.cpu_threads
    tf.config.threading.set_intra_op_parallelism_threads(threads.intra())
    if threads.inter_op != FRAMEWORK_DEFAULT:
        tf.config.threading.set_inter_op_parallelism_threads(int(threads.inter_op))
    if spec.device != "gpu":
        tf.config.set_visible_devices([], "GPU")

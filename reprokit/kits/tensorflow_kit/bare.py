"""The bench's bare TensorFlow loop, the reference the kit's own loop is judged against (reprokit/kits/bench.py)."""
from __future__ import annotations

import os
import time

from reprokit.kits.contract.spec import FRAMEWORK_DEFAULT, RunSpec
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.training_loop import bare


def loop(spec: RunSpec, arrays: datalib.Arrays, warmup: int, steps: int) -> tuple[float, float]:
    """Wall and process CPU seconds for `steps` steps after `warmup`: a tf.function step with a tape."""
    import keras
    import tensorflow as tf

    from reprokit.kits.tensorflow_kit import models

    keras.utils.set_random_seed(spec.train.seed)
    scale, resize = bare.scale_resize(spec)
    model = models.build(spec.model, spec.data.input_size)
    opt = spec.train.optimizer
    if opt.name == "adam":
        optimizer = keras.optimizers.Adam(learning_rate=opt.lr, beta_1=opt.beta1, beta_2=opt.beta2,
                                          epsilon=opt.epsilon)
    else:
        optimizer = keras.optimizers.SGD(learning_rate=opt.lr, momentum=opt.momentum,
                                         nesterov=opt.nesterov)
    optimizer.build(model.trainable_variables)       # its slots before the trace, as the kit builds them
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
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
    t0 = c0 = 0.0
    loss = None
    for i, (x, y) in enumerate(staged):
        if i == warmup:
            if loss is not None:
                loss.numpy()              # the warmup's last step has finished
            t0, c0 = time.perf_counter(), time.process_time()
        loss = train_step(x, y)
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

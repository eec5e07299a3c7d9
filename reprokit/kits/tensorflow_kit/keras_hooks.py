"""The TensorFlow probe's hooks on Keras and TensorFlow, which observe what a user's script computes.

Installed before the script's first line, each reports to the probe (reprokit/kits/tensorflow_kit/probe.py's
KerasProbe): eagerly at once, to its observer; inside a traced function (Keras fit's, or a tf.function of
the script's own) through counters the hooks add to the graph, packed in the probe's ``counts`` at the
places below, which the probe reads after each call (KerasProbe.report_graph):
- .numpy(), float() and bool() of eager tensors called from the script's own files: host syncs;
- keras.Model.__call__ (outermost call): the batch size (from the tensors) and the training argument;
- Optimizer.apply_gradients and Optimizer.apply (reprokit/kits/tensorflow_kit/optimizer_steps.py): every training step;
- keras.losses.Loss.__call__: the probe's own count of the loss and correct predictions, and the rows the
  loss received;
- tf.function: which functions the script compiled (and with jit_compile), each watched so that its calls'
  counters become events.
"""
from __future__ import annotations

import sys
import time

import keras
import tensorflow as tf
from keras.src.layers.layer import Layer

from reprokit.kits.observation.observe import HookClock, own_time
from reprokit.kits.tensorflow_kit import loss_scale, optimizer_steps

STEPS, FORWARDS, BATCH, TRAINING, CORRECT, LOSSES, LOSS_SUM = range(7)     # the packed counters' places


def install(probe) -> None:
    """Every hook, each reporting to ``probe``, in the order they must wrap one another."""
    _count_syncs(probe)
    _hook_calls(probe)
    _hook_steps(probe)
    _hook_losses(probe)
    _hook_functions(probe)


def _count_syncs(probe) -> None:
    """.numpy(), float() and bool() of eager tensors, called from the script's own files."""
    from tensorflow.python.framework import ops
    own_files = probe.own_files
    for name in ("numpy", "__float__", "__bool__"):
        real = getattr(ops._EagerTensorBase, name)

        def counted(tensor, *args, _real=real, **kwargs):
            t0 = time.perf_counter()
            if sys._getframe(1).f_code.co_filename.startswith(own_files):
                probe.observer.host_sync()
            HookClock.seconds += time.perf_counter() - t0
            return _real(tensor, *args, **kwargs)
        setattr(ops._EagerTensorBase, name, counted)


def _hook_calls(probe) -> None:
    real = Layer.__call__

    def call(layer, *args, **kwargs):
        if not isinstance(layer, keras.Model) or probe._depth or probe.certifying:
            return real(layer, *args, **kwargs)
        probe._depth += 1
        try:
            _forward(probe, layer, args, kwargs)
            out = real(layer, *args, **kwargs)
        finally:
            probe._depth -= 1
        if probe.model is None:           # until the model is known: its call, for the certificate to replay
            probe.last_call = (layer, args, kwargs, out)
        return out
    keras.Model.__call__ = call


@own_time
def _forward(probe, model, args, kwargs) -> None:
    x = args[0] if args else kwargs.get("inputs")
    first = next((t for t in tf.nest.flatten(x) if hasattr(t, "shape") and len(t.shape)), None)
    if first is None or isinstance(first, keras.KerasTensor):    # a symbolic call builds a model: no pass
        return
    training = kwargs.get("training")
    training = bool(training) if training is not None and not tf.is_tensor(training) else training
    if probe.model is None and not tf.is_tensor(training):
        probe.trained_with = bool(training)
    replicas = _replicas()
    if tf.executing_eagerly() and not probe.in_keras:
        probe._last_model = model
        probe.observer.forward(int(first.shape[0]) * replicas, bool(training), bool(training), timed=False)
        return
    # a Python flag (Keras fit's training=True) is a constant of the graph: no op
    flag = tf.cast(training, tf.float64) if tf.is_tensor(training) else float(bool(training))
    probe.counts.scatter_nd_add([[FORWARDS]], [1])
    probe.counts.scatter_nd_update([[BATCH], [TRAINING]],
                                   [tf.cast(tf.shape(first)[0] * replicas, tf.float64), flag])
    probe._last_model = model


def _replicas() -> int:
    """How many replicas take a share of this call's batch: inside a strategy's replica function (Keras fit's step
    under MirroredStrategy, a loop's strategy.run), each call sees one replica's share of the global batch."""
    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return 1
    return int(tf.distribute.get_replica_context().num_replicas_in_sync)


def _hook_steps(probe) -> None:
    """Optimizer.apply_gradients and apply: the outermost is a step (reprokit/kits/tensorflow_kit/optimizer_steps.py);
    each also says how its loss was scaled (reprokit/kits/tensorflow_kit/loss_scale.py)."""
    optimizer_steps.install(probe, lambda: probe.counts.scatter_nd_add([[STEPS]], [1]))
    loss_scale.install(probe)


def _hook_losses(probe) -> None:
    real = keras.losses.Loss.__call__

    def call(loss_fn, y_true, y_pred, *args, **kwargs):
        probe._loss_depth += 1                # Keras's compiled loss calls its own losses: count the outermost
        try:
            out = real(loss_fn, y_true, y_pred, *args, **kwargs)
        finally:
            probe._loss_depth -= 1
        if not probe._loss_depth and len(getattr(y_pred, "shape", ())) == 2 and len(out.shape) <= 1:
            # its mean over the batch, whatever its reduction (a custom loop's reduction None gives one per sample)
            reduction = (getattr(loss_fn, "get_config", dict)() or {}).get("reduction")
            mean = probe.loss_scale.mean_loss(out, tf.shape(y_pred)[0], reduction)
            _count(probe, loss_fn, y_true, y_pred, mean)
            probe.loss_scale.loss(mean)
            if probe.model is None:       # which part of the model's output the loss reads
                probe.loss_read = y_pred
        return out
    keras.losses.Loss.__call__ = call


@own_time
def _count(probe, loss_fn, y_true, y_pred, out) -> None:
    """The loss's sum and the correct predictions, and the rows it received: ops that run with every step of a
    traced function, so as few as give them."""
    y_pred = tf.cast(y_pred, tf.float32)
    one_hot = len(y_true.shape) == 2 and y_true.shape[-1] != 1        # else sparse labels, (n,) or (n, 1)
    labels = tf.argmax(y_true, 1) if one_hot else tf.reshape(tf.cast(y_true, tf.int64), [-1])
    n = tf.shape(y_pred)[0]
    loss_sum = tf.cast(out, tf.float64) * tf.cast(n, tf.float64)
    correct = tf.reduce_sum(tf.cast(tf.argmax(y_pred, 1) == labels, tf.float64))
    config = getattr(loss_fn, "get_config", dict)() or {}
    probe._logits_loss = bool(config.get("from_logits", False))
    # [the smallest output (all non-negative where it is), max |row sum - 1|, rows]
    probe.rows.assign(tf.stack([tf.reduce_min(y_pred), tf.reduce_max(tf.abs(tf.reduce_sum(y_pred, 1) - 1)),
                                tf.cast(n, tf.float32)]))
    if tf.executing_eagerly() and not probe.in_keras:
        probe.observer.loss(loss_sum, correct)
        return
    probe.counts.scatter_nd_add([[CORRECT], [LOSSES], [LOSS_SUM]], tf.stack([correct, 1.0, loss_sum]))


def _hook_functions(probe) -> None:
    real = tf.function

    def function(func=None, _caller=None, **kwargs):
        caller = _caller or sys._getframe(1).f_code.co_filename
        if func is None:                     # @tf.function(jit_compile=...): the decorator comes next
            return lambda f: function(f, _caller=caller, **kwargs)
        if caller.startswith(probe.own_files):        # the script's own, not Keras's internal functions
            probe.xla = probe.xla or bool(kwargs.get("jit_compile"))
        return _Watched(real(func, **kwargs), probe)
    tf.function = function


class _Watched:
    """A function the script made with tf.function: after each call, the graph's counters become events."""

    def __init__(self, compiled, probe) -> None:
        self._compiled, self._probe = compiled, probe

    def __call__(self, *args, **kwargs):
        probe = self._probe
        if probe.certifying:
            return self._compiled(*args, **kwargs)
        if probe._first_update and probe.model is None:
            # Trace without running: a step inside shows the model, before the first update changes it.
            self._compiled.get_concrete_function(*args, **kwargs)
            if probe.model is not None:
                probe.first_update()
        out = self._compiled(*args, **kwargs)
        if not probe.in_keras:
            probe.report_graph()
        return out

    def __get__(self, obj, objtype=None):
        return _Watched(self._compiled.__get__(obj, objtype), self._probe)

    def __getattr__(self, name):
        return getattr(self._compiled, name)

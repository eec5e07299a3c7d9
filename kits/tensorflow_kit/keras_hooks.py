"""The TensorFlow probe's hooks on Keras and TensorFlow, which observe what a user's script computes.

Installed before the script's first line, each reports to the probe (kits/tensorflow_kit/probe.py's
KerasProbe): eagerly at once, to its observer; inside a traced function (Keras fit's, or a tf.function of
the script's own) through counters the hooks add to the graph, packed in the probe's ``counts`` at the
places below, which the probe reads after each call (KerasProbe.report_graph):
- .numpy(), float() and bool() of eager tensors called from the script's own files: host syncs;
- keras.Model.__call__ (outermost call): the batch size (from the tensors) and the training argument;
- Optimizer.apply_gradients and Optimizer.apply (kits/tensorflow_kit/optimizer_steps.py): every training step;
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

from kits.observation.observe import HookClock, own_time
from kits.tensorflow_kit import optimizer_steps

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
    script_dir = probe.script_dir
    for name in ("numpy", "__float__", "__bool__"):
        real = getattr(ops._EagerTensorBase, name)

        def counted(tensor, *args, _real=real, **kwargs):
            t0 = time.perf_counter()
            if sys._getframe(1).f_code.co_filename.startswith(script_dir):
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
            return real(layer, *args, **kwargs)
        finally:
            probe._depth -= 1
    keras.Model.__call__ = call


@own_time
def _forward(probe, model, args, kwargs) -> None:
    x = args[0] if args else kwargs.get("inputs")
    first = next((t for t in tf.nest.flatten(x) if hasattr(t, "shape") and len(t.shape)), None)
    if first is None or isinstance(first, keras.KerasTensor):    # a symbolic call builds a model: no pass
        return
    training = kwargs.get("training")
    training = bool(training) if training is not None and not tf.is_tensor(training) else training
    if probe.model is None:
        probe._first_shape = tuple(first.shape)
        if not tf.is_tensor(training):
            probe.trained_with = bool(training)
    if tf.executing_eagerly() and not probe.in_keras:
        probe._last_model = model
        probe.observer.forward(int(first.shape[0]), bool(training), bool(training), timed=False)
        return
    flag = tf.cast(training if training is not None else False, tf.float64)
    probe.counts.scatter_nd_add([[FORWARDS]], [1])
    probe.counts.scatter_nd_update([[BATCH], [TRAINING]], [tf.cast(tf.shape(first)[0], tf.float64), flag])
    probe._last_model = model


def _hook_steps(probe) -> None:
    """Optimizer.apply_gradients and apply: the outermost is a step (kits/tensorflow_kit/optimizer_steps.py)."""
    optimizer_steps.install(probe, lambda: probe.counts.scatter_nd_add([[STEPS]], [1]))


def _hook_losses(probe) -> None:
    real = keras.losses.Loss.__call__

    def call(loss_fn, y_true, y_pred, *args, **kwargs):
        probe._loss_depth += 1                # Keras's compiled loss calls its own losses: count the outermost
        try:
            out = real(loss_fn, y_true, y_pred, *args, **kwargs)
        finally:
            probe._loss_depth -= 1
        if not probe._loss_depth and len(getattr(y_pred, "shape", ())) == 2 and len(out.shape) == 0:
            _count(probe, loss_fn, y_true, y_pred, out)
        return out
    keras.losses.Loss.__call__ = call


@own_time
def _count(probe, loss_fn, y_true, y_pred, out) -> None:
    y_pred = tf.cast(y_pred, tf.float32)
    one_hot = len(y_true.shape) == 2 and y_true.shape[-1] != 1        # else sparse labels, (n,) or (n, 1)
    labels = tf.argmax(y_true, 1) if one_hot else tf.reshape(tf.cast(y_true, tf.int64), [-1])
    n = tf.shape(y_pred)[0]
    loss_sum = tf.cast(out, tf.float64) * tf.cast(n, tf.float64)
    correct = tf.reduce_sum(tf.cast(tf.argmax(y_pred, 1) == labels, tf.int64))
    config = getattr(loss_fn, "get_config", dict)() or {}
    probe._logits_loss = bool(config.get("from_logits", False))
    probe.rows.assign(tf.stack([tf.cast(tf.reduce_all(y_pred >= 0), tf.float32),
                                tf.reduce_max(tf.abs(tf.reduce_sum(y_pred, 1) - 1)), tf.cast(n, tf.float32)]))
    if tf.executing_eagerly() and not probe.in_keras:
        probe.observer.loss(loss_sum, correct)
        return
    probe.counts.scatter_nd_add([[CORRECT], [LOSSES], [LOSS_SUM]], [tf.cast(correct, tf.float64), 1, loss_sum])


def _hook_functions(probe) -> None:
    real = tf.function

    def function(func=None, _caller=None, **kwargs):
        caller = _caller or sys._getframe(1).f_code.co_filename
        if func is None:                     # @tf.function(jit_compile=...): the decorator comes next
            return lambda f: function(f, _caller=caller, **kwargs)
        if caller.startswith(probe.script_dir):        # the script's own, not Keras's internal functions
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

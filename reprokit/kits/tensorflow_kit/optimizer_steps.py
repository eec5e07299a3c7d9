"""A training step, as the TensorFlow probe sees it: the outermost call of a Keras optimizer's update.

Keras fit's own train_step and most custom loops call ``Optimizer.apply_gradients(zip(grads, vars))``; a
train_step of the script's own, as Keras's guide "customizing what happens in fit()" writes it, calls
``Optimizer.apply(grads, vars)``, which apply_gradients calls in turn. Each is hooked; the outermost of
them is the step, so one update counts once whichever the script calls.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf


def install(probe, count_traced: Callable[[], object]) -> None:
    """Optimizer.apply_gradients and Optimizer.apply report each step to ``probe``
    (reprokit/kits/tensorflow_kit/probe.py's KerasProbe): eagerly as it runs; inside a traced function
    ``count_traced()`` adds it to the graph's counters."""
    optimizer_class = keras.optimizers.Optimizer
    real_gradients, real_apply = optimizer_class.apply_gradients, optimizer_class.apply
    applying = [False]                  # inside a step: apply_gradients's own call of apply is the same step

    def step(optimizer, variables: list, run: Callable[[], Any]) -> Any:
        if applying[0]:
            return run()
        applying[0] = True
        try:
            if probe.model is None:
                probe._find_model(optimizer, variables)
            probe.loss_scale.update()         # the loss this update's gradients came from, and how they add up
            if tf.executing_eagerly() and not probe.in_keras:
                probe.first_update()
                probe.observer.step_begins()
                out = run()
                probe.eager_steps += 1
                probe.observer.step_ends()
                return out
            probe.traced = True
            out = run()
            count_traced()
            return out
        finally:
            applying[0] = False

    def apply_gradients(optimizer, grads_and_vars, *args, **kwargs):
        pairs = list(grads_and_vars)
        return step(optimizer, [v for _, v in pairs], lambda: real_gradients(optimizer, pairs, *args, **kwargs))

    def apply(optimizer, grads, trainable_variables=None):
        variables = (list(getattr(optimizer, "_trainable_variables", [])) if trainable_variables is None
                     else list(trainable_variables))
        return step(optimizer, variables,
                    lambda: real_apply(optimizer, grads, None if trainable_variables is None else variables))

    optimizer_class.apply_gradients = apply_gradients
    optimizer_class.apply = apply

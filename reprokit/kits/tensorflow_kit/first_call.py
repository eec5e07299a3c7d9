"""The call a TensorFlow script made of the Keras model it trains, at its first step
(reprokit/kits/framework_free/model_call.py).

The probe's Model.__call__ hook keeps the last outermost call before the model is known (its arguments and
output), and the loss hook the prediction the loss last received. ``training`` is not part of the record: the
certificate's passes set it themselves (evaluation mode, or the script's training argument). Keras ``fit`` calls
the model with its batch alone; where the probe saw no call of the model before fit's first batch, its shape
comes from fit's input, or else the model's own Input.
"""
from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from reprokit.kits.framework_free import model_call
from reprokit.kits.framework_free.model_call import BATCH, Argument, ModelCall


def is_tensor(value: Any) -> bool:
    return tf.is_tensor(value) or isinstance(value, (np.ndarray, keras.KerasTensor))


def _rng(value: Any) -> str | None:
    if isinstance(value, tf.random.Generator):
        return "a tf.random.Generator"
    return "a keras.random.SeedGenerator" if isinstance(value, keras.random.SeedGenerator) else None


def _shape(t: Any) -> str:
    return f"{getattr(t.dtype, 'name', t.dtype)} {tuple(t.shape)}"


def record(model: keras.Model, args: tuple, kwargs: dict, output: Any, loss_read: Any) -> ModelCall:
    """The trained model's call as the script made it, and the part of its output the loss read."""
    rest = {k: v for k, v in kwargs.items() if k != "training"}
    call = model_call.record(type(model).__name__, model.call, args, rest, is_tensor, _rng, _shape)
    made_inside = [a.name for a in [*call.args, *call.kwargs.values()]
                   if a.role != BATCH and tf.is_tensor(a.value) and not hasattr(a.value, "numpy")]
    if made_inside:
        raise model_call.Unreplayable(
            f"the script calls its {type(model).__name__} with {made_inside[0]}, a tensor it makes inside its "
            f"tf.function, which the certificate cannot call it with again: certify a script that calls the model "
            f"with its batch alone")
    batch = _batch(call)
    rows = batch.shape[0] if batch is not None and len(batch.shape) else None
    call.part, call.part_why = model_call.choose_part(
        output, is_tensor, (lambda t: t is loss_read) if loss_read is not None else None,
        int(rows) if rows is not None else None)
    return call


def plain(model: keras.Model, output_part: Any = ()) -> ModelCall:
    """Keras fit's call of the model: its batch alone (with the training argument fit gives)."""
    return ModelCall(type(model).__name__, [Argument("inputs", BATCH, "its batch")], {}, (("index", 0),), output_part,
                     "the model returns one array" if not output_part else "fit's compiled loss reads every output: "
                     "the first is compared")


def _batch(call: ModelCall) -> Any:
    holder = call.args[call.batch_at[0][1]] if call.batch_at[0][0] == "index" else call.kwargs[call.batch_at[0][1]]
    value = holder.value
    for step in call.batch_at[1:]:
        value = value[step[1]]
    return value


def input_shape(model: keras.Model, call: ModelCall | None, fit_input: Any) -> tuple[int, ...]:
    """Each sample's shape as the script fed its model: the recorded call's batch, else fit's input (its arrays
    or its tf.data dataset's spec), else the model's own Input."""
    candidates = []
    if call is not None and (batch := _batch(call)) is not None:
        candidates.append(tuple(batch.shape[1:]))
    if isinstance(fit_input, np.ndarray):
        candidates.append(fit_input.shape[1:])
    elif isinstance(fit_input, tf.data.Dataset):
        spec = tf.nest.flatten(fit_input.element_spec)[0]
        candidates.append(tuple(spec.shape[1:]))
    inputs = getattr(model, "inputs", None)
    if inputs:
        candidates.append(tuple(inputs[0].shape[1:]))
    shape = next((s for s in candidates if s and None not in s), None)
    if shape is None:
        raise model_call.Unreplayable(
            f"the script's {type(model).__name__} saw no batch before its first step, and neither fit's input nor "
            f"the model says its input shape ({', '.join(map(str, candidates)) or 'none'}): give the model an Input "
            f"or keras.Input(shape=...), or call it once before training")
    return tuple(int(d) for d in shape)


def replay_calls(model: keras.Model, call: ModelCall) -> None:
    """Every later call of the model replays the script's (its other arguments, the output's part its loss
    read); the certificate's passes give the training argument. The script stops after its certificate, so the
    model keeps the replay."""
    if call.plain():
        return
    original = model.call

    def replayed(inputs: Any, *args: Any, training: Any = None, **kwargs: Any) -> Any:
        def run(*a: Any, **k: Any) -> Any:
            return original(*a, training=training, **k) if model._call_has_training_arg else original(*a, **k)
        return call.replay(run, inputs)
    object.__setattr__(model, "call", replayed)

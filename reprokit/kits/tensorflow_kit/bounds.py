"""The TensorFlow probe's bounds: each ends a pass early, and changes nothing a step it runs computes.

A bound never changes a batch, an order or a mode: a bounded run's steps are the unbounded run's first
steps, epoch by epoch (tests/test_bounds_keras.py holds one against the other). Read against Keras 3.15:
- Keras fit, evaluate and predict are never bounded by their own ``steps_per_epoch`` / ``steps``: without
  ``batch_size`` Keras sizes an array's batches to fit those steps (the CNN tutorial's 50,000 images in 3
  steps of 16,667, not its default 32), and with ``steps_per_epoch`` it reads one iterator across epochs,
  so epoch 2 would go on at epoch 1's batch N+1 instead of its own new pass. ``epochs`` is capped.
- A pass (an epoch's training: N steps; an evaluation: max(M batches, the bound's samples)) ends as
  Keras ends the unbounded one, so that what comes after it is the same: a shuffled tf.data dataset draws
  a seed per iterator, and Keras makes the next pass's iterator when a pass of known length ends. Where
  Keras knows the pass's length, its epoch iterator is told the pass is done (it ends it as after its last
  batch); where it does not, the step function raises StopIteration (Keras's end of data, as unbounded);
  where the script's own steps_per_epoch has Keras read one iterator across epochs, the batches past the
  bound are read and not trained on, so the next epoch starts where the unbounded one does.
- a loop over a tf.data dataset outside Keras: each pass is a LoaderPass (reprokit/kits/observation/bounds.py), which
  ends it between batches.
"""
from __future__ import annotations

import inspect
import time
import warnings
from typing import Any

import keras
import tensorflow as tf
from keras.src.trainers.epoch_iterator import EpochIterator

from reprokit.kits.measurement.phases import EVAL
from reprokit.kits.observation.observe import Bounded
from reprokit.kits.tensorflow_kit.read_settings import pipeline_settings

# Keras warns so when a step function's StopIteration ends a pass: here, where the bound ended it
RAN_OUT = "Your input ran out of data"
FUNCTIONS = {"fit": "train_function", "evaluate": "test_function", "predict": "predict_function"}


def declared() -> str:
    """What the bounds do to Keras's loops, as a shim."""
    return ("Keras fit, evaluate and predict keep the script's own batch size, order and steps_per_epoch: each "
            "pass ends at its bound as Keras ends a pass that ran out of data (where the script's steps_per_epoch "
            "has Keras read one iterator across epochs, an epoch's batches past the bound are read and not trained "
            "on, and its callbacks see them); predict returns the outputs of the batches it ran")


def install(probe) -> None:
    """Keras fit, evaluate and predict get the probe's callback and bounds; a tf.data pass outside them is
    bounded (``probe``: reprokit/kits/tensorflow_kit/probe.py's KerasProbe)."""
    active: list[Loop] = []
    _hook_keras_loops(probe, active)
    _register_epoch_iterators(active)
    _bound_datasets(probe)


def _hook_keras_loops(probe, active: list[Loop]) -> None:
    for name in FUNCTIONS:
        real = getattr(keras.Model, name)

        def run(model, *args, _real=real, _name=name, **kwargs):
            if probe.in_keras:
                return _real(model, *args, **kwargs)
            call = inspect.signature(_real).bind(model, *args, **kwargs)
            loop = Loop(probe, model, _name, call.arguments)
            probe.in_keras += 1
            active.append(loop)
            try:
                with warnings.catch_warnings():
                    if loop.bounded:
                        warnings.filterwarnings("ignore", message=RAN_OUT)
                    return _real(*call.args, **call.kwargs)
            finally:
                active.pop()
                probe.in_keras -= 1
                loop.restore()
        setattr(keras.Model, name, run)


def _register_epoch_iterators(active: list[Loop]) -> None:
    """Each Keras epoch iterator, to the loop that made it: fit's first is its training's, then its
    validation's; evaluate and predict make one."""
    real = EpochIterator.__init__

    def init(iterator, *args, **kwargs):
        real(iterator, *args, **kwargs)
        if active:
            active[-1].iterators.append(iterator)
    EpochIterator.__init__ = init


class Loop(keras.callbacks.Callback):
    """The callback the probe adds to a Keras fit, evaluate or predict: it reports each batch to the observer
    and ends each pass at the bounds."""

    def __init__(self, probe, model, name: str, arguments: dict[str, Any]) -> None:
        super().__init__()
        self.probe, self.observer, self.bounds = probe, probe.observer, probe.observer.spec.bounds
        self.name, self.model_, self.iterators = name, model, []
        self.batches = self.samples = 0
        self.done = dict.fromkeys(FUNCTIONS.values(), False)    # by step function: its pass reached the bound
        # the script's own steps_per_epoch: Keras reads one iterator across the epochs
        self.continues = bool(arguments.get("steps_per_epoch"))
        b = self.bounds
        self.bounded = bool(b.max_steps or b.epochs) if name == "fit" else bool(b.eval_steps)
        arguments["callbacks"] = [*(arguments.get("callbacks") or []), self]
        probe.keras_loop_begins(model, arguments.get("x") if name == "fit" else None)
        if name == "fit":
            self._fit_epochs(arguments)

    def _fit_epochs(self, arguments: dict[str, Any]) -> None:
        """fit's ``epochs``, the index it ends at: the epochs the bound leaves (after earlier fits' and loops'),
        counted from its initial_epoch."""
        self.observer.epoch_ends()            # an epoch left open by an earlier loop ends as this fit begins
        if self.bounds.epochs:
            first = arguments.get("initial_epoch", 0)
            left = max(0, self.bounds.epochs - len(self.observer.m.steps_per_epoch))
            arguments["epochs"] = min(arguments.get("epochs", 1), first + left)
        if self.bounded:
            self.observer.bounded.add("fit")

    def _begins(self, kind: str) -> None:
        """A pass of this step function begins: the model's function is bounded."""
        self.done[kind] = False
        function = getattr(self.model, kind, None)
        if self.bounded and function is not None and not isinstance(function, _StepBound):
            setattr(self.model, kind, _StepBound(function, self, kind))

    def restore(self) -> None:
        """The model's own step functions again, once the loop returned (or raised)."""
        for kind in FUNCTIONS.values():
            function = getattr(self.model_, kind, None)
            if isinstance(function, _StepBound):
                setattr(self.model_, kind, function.inner)

    def _reached(self, kind: str, iterator: EpochIterator | None) -> None:
        """The pass reached its bound: where Keras knows the pass's length, its epoch iterator ends it as after
        its last batch (and makes the next pass's iterator, as unbounded); else the step function ends it."""
        self.done[kind] = True
        known = iterator is not None and not self.reads_on(kind) and iterator.data_adapter.num_batches is not None
        if known and iterator._num_batches and iterator._steps_seen < iterator._num_batches:
            iterator._steps_seen = iterator._num_batches
            self._cut()

    def reads_on(self, kind: str) -> bool:
        """Whether Keras reads this function's iterator on across passes (fit's, with its own steps_per_epoch)."""
        return kind == "train_function" and self.continues

    def _cut(self) -> None:
        if self.name != "fit":
            self.observer.bounded.add("evaluation")

    # -- fit's training --------------------------------------------------------------------------------

    def on_epoch_begin(self, epoch, logs=None):
        self._begins("train_function")
        self.observer.epoch_ends()            # the epoch before, left open for an evaluation, ends here

    def on_train_batch_begin(self, batch, logs=None):
        self.probe.keras_batch_begins(self.model)

    def on_train_batch_end(self, batch, logs=None):
        self.probe.report_graph("train")
        if self.bounds.max_steps and batch + 1 >= self.bounds.max_steps and not self.done["train_function"]:
            self._reached("train_function", self.iterators[0] if self.iterators else None)

    def on_epoch_end(self, epoch, logs=None):
        """An epoch that ran its validation ends; one without stays open, its training clock stopped, so that
        the script's own evaluation after fit is its evaluation."""
        if self.observer.phase == EVAL:
            self.observer.epoch_ends()
        else:
            self.observer.training_stops()

    # -- evaluation ------------------------------------------------------------------------------------

    def on_test_begin(self, logs=None):
        self.batches = self.samples = 0
        self._begins("test_function")

    def on_predict_begin(self, logs=None):
        self.batches = self.samples = 0
        self._begins("predict_function")

    def on_test_batch_end(self, batch, logs=None):
        self._evaluated("test_function")

    def on_predict_batch_end(self, batch, logs=None):
        self._evaluated("predict_function")

    def _evaluated(self, kind: str) -> None:
        """After an evaluation batch: its pass ends once it has the bound's batches and samples."""
        self.samples += self.probe.report_graph("eval")
        self.batches += 1
        b = self.bounds
        if b.eval_steps and self.batches >= b.eval_steps and self.samples >= (b.eval_samples or 0) \
                and not self.done[kind]:
            self._reached(kind, self.iterators[-1] if self.iterators else None)


class _StepBound:
    """A Keras step function (train, test or predict), bounded: once its pass reached the bound it raises
    StopIteration (Keras's end of data), or, where Keras reads one iterator across epochs, reads the batches
    the steps would have taken without training on them."""

    def __init__(self, inner, loop: Loop, kind: str) -> None:
        self.inner, self.loop, self.kind, self.logs = inner, loop, kind, None

    def __call__(self, data):
        loop = self.loop
        if not loop.done[self.kind]:
            self.logs = self.inner(data)
            return self.logs
        if not loop.reads_on(self.kind):
            loop._cut()
            raise StopIteration
        for _ in range(loop.model.steps_per_execution):
            next(data)
        return self.logs


def _bound_datasets(probe) -> None:
    """A tf.data dataset the script iterates itself (not inside Keras fit, evaluate or predict): each pass is a
    loader pass, bounded."""
    real_iter = tf.data.Dataset.__iter__

    def bounded_iter(dataset):
        inner = real_iter(dataset)
        if probe.in_keras:
            return inner
        return _TimedBounded(inner, probe.observer.loader_pass(id(dataset), None, None, pipeline_settings(dataset)))
    tf.data.Dataset.__iter__ = bounded_iter


class _TimedBounded(Bounded):
    """A tf.data iterator, bounded; the time the loop waits in it is the data wait."""

    def _fetch(self):
        t0 = time.perf_counter()
        batch = next(self._inner)
        self._bound.observer.fetched(time.perf_counter() - t0)
        return batch

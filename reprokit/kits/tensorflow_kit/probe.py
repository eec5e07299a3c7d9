"""TensorFlow's (Keras 3's) side of the probe: the framework's own hooks, installed before the script's first line.

A training step is an optimizer's apply_gradients, whatever the loop: Keras fit's, a custom loop run
eagerly, or one inside a tf.function. Eagerly the hooks see each call; inside a traced function a
Python hook runs once, at the trace, so the probe adds small counters to the graph (steps, forward
passes, the last batch's size and training argument, the loss's sums), declared, and reads them after
each call of a function the script made with tf.function, and in Keras fit, evaluate and predict from
a callback the probe adds. Observation hooks (no change to what the script computes, but the graph's
counters and a read of them per step, which waits for the device; reprokit/kits/tensorflow_kit/keras_hooks.py):
- keras.Model.__call__ (outermost call): the batch size (from the tensors) and the training argument;
- Optimizer.apply_gradients and Optimizer.apply (reprokit/kits/tensorflow_kit/optimizer_steps.py): every training step;
  eagerly, whether the loop runs eagerly;
- keras.losses.Loss.__call__: the probe's own count of the loss and correct predictions, and the rows
  the loss received;
- tf.function: which functions the script compiled (and with jit_compile);
- Keras fit, evaluate, predict: a callback for each batch and epoch, which also holds them to the bounds
  (reprokit/kits/tensorflow_kit/bounds.py, with the bounds of the script's own tf.data passes).
"""
from __future__ import annotations

import inspect
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from reprokit.kits import served_data  # noqa: E402
from reprokit.kits.contract import settings as settings_lib  # noqa: E402
from reprokit.kits.contract import work_folder  # noqa: E402
from reprokit.kits.framework_free import model_call  # noqa: E402
from reprokit.kits.framework_free.measure import rss_bytes  # noqa: E402
from reprokit.kits.observation.observe import Observer, own_time  # noqa: E402
from reprokit.kits.tensorflow_kit import bounds, first_call, keras_hooks  # noqa: E402
from reprokit.kits.tensorflow_kit.keras_hooks import BATCH, CORRECT, FORWARDS, LOSS_SUM, LOSSES, STEPS, TRAINING  # noqa: E402
from reprokit.kits.tensorflow_kit.loss_scale import LossScale  # noqa: E402
from reprokit.kits.tensorflow_kit.read_settings import framework_settings, model_settings, pipeline_settings  # noqa: E402
from reprokit.kits.training_loop.staged_data import StagedData  # noqa: E402


class KerasProbe:
    HOOKS = (".numpy(), float() and bool() of eager tensors called from the script's own files: counted",
             "Optimizer.apply_gradients and Optimizer.apply (the outermost): every training step, whatever the loop "
             "(Keras fit, a train_step of the script's own, a custom loop, eager or traced)",
             "keras.Model.__call__ (outermost): each forward pass's batch size and training argument",
             "keras.losses.Loss.__call__: the probe's own count of loss and correct predictions",
             "inside a traced function: counters added to the graph (steps, forward passes, the last batch's size "
             "and training argument, the loss's sums), read after each call of the script's tf.functions and "
             "from a callback added to Keras fit, evaluate and predict: a read per step waits for the device",
             "tf.function: which functions the script compiled, and whether with XLA")

    def __init__(self, script_dir: Path) -> None:
        self.script_dir = str(script_dir)
        self.own_files = work_folder.own_files(script_dir)      # the script's own code (a notebook's cells too)
        self.observer: Observer | None = None
        self.model = None
        self.models: list[str] = []
        self.in_keras = 0                     # inside fit / evaluate / predict: their callback reports
        self.eager_steps = 0
        self.traced = False                   # a step ran inside a traced function
        self.xla = False
        self.fit_input = None                 # the last fit's x: a tf.data dataset's own time is measured after
        self.pipeline_note: str | None = None
        self._depth = self._loss_depth = 0
        # The graph's counters, packed in one float64 variable so that the one read that waits after a call gets
        # them all (counts stay exact up to 2**53): [steps, forward passes, the last batch's size, its training
        # argument, correct predictions, losses counted, the loss's sum]; and the last rows the loss received
        # [their smallest value, max |row sum - 1|, rows], read once at the end.
        with tf.device("/CPU:0"):
            self.counts = tf.Variable(tf.zeros(7, tf.float64), trainable=False)
            self.rows = tf.Variable(tf.zeros(3, tf.float32), trainable=False)
        self._read = self._last = [0.0] * 7
        self._replaying = False               # report_graph is handing the observer its read's events
        self._logits_loss: bool | None = None
        self.optimizer = None
        self.others: list[str] = []            # variables an optimizer steps outside the trained model
        self.trained_with: bool | None = None  # the training argument of the first pass (a Python value)
        self.certifying = False                # the certificate's own passes: not the script's
        self._first_update: list = []
        self.last_call: tuple | None = None    # until the model is known: its last call (model, args, kwargs, out)
        self.loss_scale = LossScale()      # how its steps scale their loss (reprokit/kits/tensorflow_kit/loss_scale.py)
        self.loss_read = None                  # ... and the prediction its loss last received

    # -- what the run uses -----------------------------------------------------------------------------

    def sync(self) -> None:
        # Reading a variable waits for the steps that wrote it: one op through value(), where numpy() adds a copy
        # op and a name scope (13 us against 30 on the project's 2-core CPU). While report_graph hands a read's
        # events to the observer, the syncs they make are that read, not a second one per step.
        if not self._replaying:
            self._read = self.counts.value().numpy().tolist()       # Python floats: cheaper to subtract than numpy's

    def memory_now(self) -> int:
        if tf.config.list_physical_devices("GPU"):
            return int(tf.config.experimental.get_memory_info("GPU:0")["current"])
        return rss_bytes()

    def on_gpu(self) -> bool:
        return bool(tf.config.list_physical_devices("GPU"))

    def device_ids(self) -> tuple[str | None, str | None]:
        """(a UUID: TensorFlow names none, the PCI bus id of its first GPU) for the NVML sampler."""
        from reprokit.kits.tensorflow_kit.backend import _pci_bus_id
        return None, _pci_bus_id() if self.on_gpu() else None

    def gpu_counters(self) -> list:
        from reprokit.kits.tensorflow_kit.backend import _AllocatorPeak
        return [_GuardedPeak(_AllocatorPeak())]

    def memory_series(self) -> str:
        return ("tf.config.experimental.get_memory_info('GPU:0')['current']" if tf.config.list_physical_devices("GPU")
                else "process resident memory (VmRSS)")

    def sync_meaning(self) -> str:
        return ("each waits for the GPU's queued work" if tf.config.list_physical_devices("GPU") else
                "on a CPU nothing waits; on a GPU each would wait for the queued work")

    def as_float(self, value) -> float:
        return float(value.numpy()) if hasattr(value, "numpy") else float(value)

    # -- installing ------------------------------------------------------------------------------------

    def install(self, observer: Observer) -> None:
        self.observer = observer
        keras_hooks.install(self)
        bounds.install(self)

    @own_time
    def _find_model(self, optimizer, variables) -> None:
        stepped = {id(v) for v in variables}
        model = getattr(self, "_last_model", None)
        if model is not None and any(id(v) in stepped for v in model.trainable_variables):
            mine = {id(v) for v in model.trainable_variables}
            self._found(model, optimizer, ["variables outside the model it ran"] if stepped - mine else [])

    def _found(self, model, optimizer, others: list[str]) -> None:
        self.model, self.optimizer, self.others = model, optimizer, others
        task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
        if task.get("type") in ("worker", "chief"):          # a task of a multi-worker strategy: a rank
            workers = json.loads(os.environ["TF_CONFIG"]).get("cluster", {})
            self.group = {"rank": int(task.get("index", 0)) + (task["type"] == "worker" and "chief" in workers),
                          "ranks": sum(len(v) for k, v in workers.items() if k in ("worker", "chief")),
                          "backend": None}
        self.models += [f"{type(model).__name__} with {model.count_params():,} parameters", *others]

    # -- the graph's counters ------------------------------------------------------------------------

    @own_time
    def report_graph(self, phase: str | None = None) -> int:
        """After a traced call: the forward passes and steps it ran, as events for the observer; the samples it
        ran (its passes times the last one's batch)."""
        self.observer.sync()                 # the call's steps end first: a wait, not the probe's own work
        counts, last = self._read, self._last   # the sync's read of the counters (KerasProbe.sync)
        self._last = counts
        steps, forwards = int(counts[STEPS] - last[STEPS]), int(counts[FORWARDS] - last[FORWARDS])
        if not forwards and not steps:
            return 0
        training = bool(counts[TRAINING]) if phase is None else phase == "train"
        batch = int(counts[BATCH])
        self._replaying = True
        try:
            self.observer.forward(batch, training, training, timed=False)
            if counts[LOSSES] > last[LOSSES]:          # predict, or a function without a loss, counts none
                self.observer.loss(float(counts[LOSS_SUM] - last[LOSS_SUM]), int(counts[CORRECT] - last[CORRECT]))
            for _ in range(steps):
                self.observer.step_begins()
                self.observer.step_ends()
        finally:
            self._replaying = False
        return forwards * batch

    def bound_shims(self) -> list[str]:
        """How the spec's bounds act on Keras's own loops, where there are any
        (reprokit/kits/tensorflow_kit/bounds.py)."""
        b = self.observer.spec.bounds
        return [bounds.declared()] if b.max_steps or b.epochs or b.eval_steps else []

    def keras_loop_begins(self, model, fit_input) -> None:
        """A Keras fit (``fit_input``: its x), evaluate or predict begins, on ``model``."""
        self._last_model = model
        if fit_input is not None:
            self.fit_input = fit_input

    def keras_batch_begins(self, model) -> None:
        """Keras fit's batch begins: at the first, the trained model is known, before its first update."""
        if self._first_update and self.model is None:
            self._found(model, model.optimizer, [])
            self.trained_with = True
            self._logits_loss = _expects_logits(model.loss)
            self.first_update()

    def _time_pipeline(self) -> None:
        """The last fit's input pipeline on its own, over as many batches as training took: inside fit it runs
        in the traced step, so its wait cannot be told from the step's. Timed once the script ended: a pass
        draws the next of a shuffled dataset's seeds, which would change the order of the script's later
        passes."""
        m = self.observer.m
        if not isinstance(self.fit_input, tf.data.Dataset) or not self.observer.steps:
            self.pipeline_note = "the fit's input was not a tf.data dataset: its input is sliced inside the step"
            return
        n = max(1, len(m.observed_batch_sizes) - self.observer.spec.warmup_steps)
        t0 = time.perf_counter()
        for _ in self.fit_input.take(n):
            pass
        m.data_wait_s = time.perf_counter() - t0
        self.pipeline_note = (f"data wait: the fit's tf.data input on its own over {n} batches, timed after training "
                              f"(Keras fit runs it inside the traced step, where its wait cannot be told apart)")

    # -- the certificate -------------------------------------------------------------------------------

    def at_first_update(self, call) -> None:
        """``call()`` before the first optimizer step changes the weights: eagerly at apply_gradients, at the
        first batch of Keras fit, or before the first call of a tf.function whose trace holds a step."""
        self._first_update.append(call)

    def first_update(self) -> None:
        calls, self._first_update = self._first_update, []
        for call in calls:
            call()

    def captured(self, other_input: np.ndarray | None):
        """The trained model in the certificate's canonical form, its input the PyTorch side's batch where the
        model takes that shape, else standard normal numbers of its own input shape."""
        from reprokit.kits.tensorflow_kit.canonical import Captured
        seen = self.last_call if self.last_call and self.last_call[0] is self.model else None
        call = first_call.record(*seen, self.loss_read) if seen else first_call.plain(self.model)
        shape = first_call.input_shape(self.model, call if seen else None, self.fit_input)
        x = model_call.as_shape(other_input, shape) if other_input is not None else None
        self.own_input = x is None and other_input is not None
        if x is None:
            x = np.random.default_rng(0).standard_normal((8, *shape)).astype(np.float32)
        return Captured(self.model, self.optimizer, x, call, self.trained_with is not False, self._logits_loss,
                        f"the TensorFlow script's {type(self.model).__name__}")

    # -- what it saw -------------------------------------------------------------------------------------

    @property
    def evidence(self) -> Any:
        """What its steps showed of their loss's scale (reprokit/kits/ranks/watch.py reads ``evidence.report()``)."""
        return _Evidence(self.loss_scale)

    def batchnorm_sync(self) -> str | None:
        """Whether its BatchNormalization layers synchronise their statistics across the replicas (synchronized=True);
        None without one."""
        norms = [layer for layer in (self.model._flatten_layers() if self.model is not None else [])
                 if isinstance(layer, keras.layers.BatchNormalization)]
        if not norms:
            return None
        synced = sum(bool(getattr(layer, "synchronized", False)) for layer in norms)
        return "synchronized" if synced == len(norms) else "per device" if not synced else "mixed"

    def replicas(self) -> int | None:
        """The replicas the trained model's strategy mirrors it on (MirroredStrategy's devices), once it is known."""
        strategy = getattr(self.model, "distribute_strategy", None) if self.model is not None else None
        return int(strategy.num_replicas_in_sync) if strategy is not None else None

    def input_reader(self) -> str | None:
        """How a Keras fit read its batches (a custom loop's loader passes say it themselves)."""
        if self.fit_input is None:
            return None
        if isinstance(self.fit_input, tf.data.Dataset):
            return "Keras fit over the script's own tf.data dataset"
        return "Keras fit's own batches of the script's arrays"

    def finish(self) -> None:
        """The script ended: the last fit's pipeline timed, and the loss's rows as the last call left them (a
        traced loss writes them to the graph's counters)."""
        if self.fit_input is not None:
            self._time_pipeline()
        smallest, error, rows = (float(x) for x in self.rows.numpy())
        if self._logits_loss is not None and rows:
            self.observer.seen["loss_input_probe"] = {"expects_logits": self._logits_loss, "rows": int(rows),
                                                      "nonnegative": smallest >= 0, "max_row_sum_error": error}

    def eager_loop(self) -> bool:
        """A custom loop whose steps ran eagerly: no tf.function traced them."""
        return bool(self.eager_steps) and not self.traced

    def execution(self) -> str:
        if self.eager_loop():
            return "eager"
        # Keras fit compiles with XLA where model.jit_compile resolved to True; a custom loop where its
        # tf.function asked
        fit_xla = self.fit_input is not None and getattr(self.model, "jit_compile", None) is True
        return "tf.function graph with XLA" if fit_xla or self.xla else "tf.function graph"

    def environment(self) -> dict:
        from reprokit.kits.framework_free.environment import cpu_name, nvidia_smi
        build = tf.sysconfig.get_build_info()
        gpus = tf.config.list_physical_devices("GPU")
        return {
            "framework": "tensorflow", "framework_version": tf.__version__, "keras_version": keras.__version__,
            "build": {"cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version")},
            "python": platform.python_version(), "numpy": np.__version__,
            "device": "gpu" if gpus else "cpu",
            "device_name": (tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU") if gpus
                            else cpu_name()),
            "gpus": nvidia_smi() if gpus else [], "gpu_count": len(gpus),
            "cpu_threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                            "inter_op": tf.config.threading.get_inter_op_parallelism_threads()},
            "settings": (settings := self.settings()),
            "data_layout": settings.get("data_layout", {}).get("value"), "execution": self.execution(),
            "tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
            "tf32_ops": dict.fromkeys(("matmul", "convolution"),
                                      tf.config.experimental.tensor_float_32_execution_enabled()),
            "cudnn_autotune": os.environ.get("TF_CUDNN_USE_AUTOTUNE", "1") not in ("0", "false", "False"),
            "precision": {"requested": "as the script ran it",
                          "compute_dtype": keras.mixed_precision.global_policy().compute_dtype,
                          "how": f"Keras policy {keras.mixed_precision.global_policy().name}"},
        }

    def settings(self) -> dict:
        """environment.settings as the script left TensorFlow at its end: its model's, how its steps ran (what the
        probe saw of them), and the pipeline its training steps took their batches from."""
        out = framework_settings(tf.config.list_physical_devices("GPU"))
        if self.model is not None:
            out.update(model_settings(self.model, None))
        how = ("its steps ran eagerly, outside any tf.function" if self.eager_loop() else
               "its steps ran in a tf.function (Keras fit's, or the script's own); XLA where its jit_compile or the "
               "model's asked")
        run_eagerly = tf.config.functions_run_eagerly()
        out["execution"] = settings_lib.read("eager" if run_eagerly else self.execution(),
                                             "tf.config.functions_run_eagerly() is True" if run_eagerly else how)
        loader = self.observer.training_pass() if self.observer else None
        if loader is not None and loader.settings:
            out.update(loader.settings)
        elif isinstance(self.fit_input, tf.data.Dataset):
            out.update(pipeline_settings(self.fit_input))
        else:
            arrays = self.fit_input is not None
            why = ("Keras fit's own adapter over the script's arrays" if arrays else
                   "the script's own loop (no tf.data dataset): each batch is made in the loop")
            seen = settings_lib.not_reported(why) if arrays else settings_lib.read(0, why)
            out.update({"loader.workers": seen, "loader.prefetch": seen,
                        "loader.pin_memory": settings_lib.not_reported(why)})
        return out

    def parameters(self) -> dict:
        if self.model is None:
            return {"total": 0, "trainable": 0}
        count = lambda vs: int(sum(np.prod(v.shape) for v in vs))   # noqa: E731
        return {"total": count(self.model.weights), "trainable": count(self.model.trainable_weights)}

    def layers(self) -> list[str]:
        if self.model is None:
            return []
        leaves = [layer for layer in self.model._flatten_layers(include_self=False) if not layer._layers]
        return [type(layer).__name__ for layer in leaves]

    def stage_data(self, named: StagedData, tfds_root: Path | None) -> list[str]:
        """The named datasets served by each library the script imports, and by URL (reprokit/kits/served_data/)."""
        return served_data.install(named, tfds_root)


def _expects_logits(loss) -> bool | None:
    """Whether the loss a model was compiled with takes logits (its from_logits); None if not one loss."""
    if isinstance(loss, str):
        loss = keras.losses.get(loss)
    if isinstance(loss, keras.losses.Loss):
        return bool(loss.get_config().get("from_logits", False))
    parameter = inspect.signature(loss).parameters.get("from_logits") if callable(loss) else None
    return bool(parameter.default) if parameter is not None else None


class _GuardedPeak:
    """TensorFlow's allocator peak, once the script's first op has made the GPU's context."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def reset(self, phase: str) -> None:
        try:
            self.inner.reset(phase)
        except (ValueError, RuntimeError, tf.errors.OpError):
            pass

    def read(self) -> dict:
        try:
            return self.inner.read()
        except (ValueError, RuntimeError, tf.errors.OpError) as exc:
            return {"allocated": {"peak_bytes": None, "source": f"no GPU context yet ({exc})"}}


class _Evidence:
    def __init__(self, scale: LossScale) -> None:
        self.scale = scale

    def report(self) -> dict[str, Any]:
        return {"loss_scale": self.scale.report()}


Probe = KerasProbe      # what reprokit/kits/probe.py looks up in every framework's kit

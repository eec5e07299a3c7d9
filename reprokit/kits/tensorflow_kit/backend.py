"""TensorFlow (Keras 3) behind the shared Backend interface."""
from __future__ import annotations

import contextlib
import os
import platform
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")   # keep the log tail for real errors

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from reprokit.kits.contract import settings as settings_lib  # noqa: E402
from reprokit.kits.contract.pitfalls import Pitfall  # noqa: E402
from reprokit.kits.contract.spec import FRAMEWORK_DEFAULT, RunSpec  # noqa: E402
from reprokit.kits.framework_free import (
    cpu_peak,
    custom,  # noqa: E402
)
from reprokit.kits.framework_free.environment import cpu_name, nvidia_smi  # noqa: E402
from reprokit.kits.framework_free.measure import WindowTimer, rss_bytes  # noqa: E402
from reprokit.kits.tensorflow_kit import models, trace  # noqa: E402
from reprokit.kits.tensorflow_kit.mirrored import Mirrored  # noqa: E402
from reprokit.kits.tensorflow_kit.pipeline import PostedFeeder  # noqa: E402
from reprokit.kits.tensorflow_kit.read_settings import NO_PINNING, framework_settings, model_settings, pipeline_settings  # noqa: E402,E501
from reprokit.kits.training_loop.feeding import FeederMixin, HookFeeder, NumpyFeeder  # noqa: E402


class Backend(FeederMixin):
    name = "tensorflow"

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.pitfalls = spec.pitfalls
        numerics = spec.numerics
        threads = numerics.cpu_threads
        # Thread pools are fixed at the first op: set them before anything runs.
        # (A second Backend in one process, as the certificate makes, finds them set: unchanged settings pass.)
        if tf.config.threading.get_intra_op_parallelism_threads() != threads.intra():
            tf.config.threading.set_intra_op_parallelism_threads(threads.intra())
        # FRAMEWORK_DEFAULT keeps TensorFlow's own inter-op pool (0: one thread per core)
        if threads.inter_op != FRAMEWORK_DEFAULT and tf.config.threading.get_inter_op_parallelism_threads() != \
                threads.inter_op:
            tf.config.threading.set_inter_op_parallelism_threads(int(threads.inter_op))
        self.gpus = tf.config.list_physical_devices("GPU") if spec.device == "gpu" else []
        if spec.device != "gpu" and tf.config.get_visible_devices("GPU"):
            tf.config.set_visible_devices([], "GPU")
        for gpu in self.gpus:
            # Without this TensorFlow reserves nearly the whole device and its peak means nothing.
            tf.config.experimental.set_memory_growth(gpu, True)
        # FRAMEWORK_DEFAULT leaves TensorFlow's own: TF32 on (Ampere and newer), cuDNN autotuning on.
        if numerics.tf32 != FRAMEWORK_DEFAULT:
            tf.config.experimental.enable_tensor_float_32_execution(numerics.tf32)
        if numerics.cudnn_autotune != FRAMEWORK_DEFAULT:
            os.environ["TF_CUDNN_USE_AUTOTUNE"] = "1" if numerics.cudnn_autotune else "0"
        keras.utils.set_random_seed(spec.train.seed)
        policy = {"bf16_mixed": "mixed_bfloat16", "fp16_mixed": "mixed_float16"}.get(numerics.precision)
        if policy:
            keras.mixed_precision.set_global_policy(policy)
        data = spec.data
        self.resize = data.input_size if data.resize == "bilinear" else None
        unit = data.scale == "unit" and not self.pitfalls.has(Pitfall.TF_INPUTS_0_255)
        self.scale = 1.0 / 255.0 if unit else 1.0
        self._loss_sum = tf.Variable(0.0, dtype=tf.float32, trainable=False)
        self._correct = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._probe = None
        self._loss_dtype = None
        self._last_loss = None     # the last step's loss: what sync reads
        # The user's own code where the spec names it (Keras has no posted bookkeeping to reproduce).
        self.input_hook = custom.hook(spec, "input", "tensorflow")
        self.evaluate_hook = custom.hook(spec, "evaluate", "tensorflow")
        self.metrics_hook = custom.hook(spec, "metrics", "tensorflow")
        self.metrics_source = (f"the user's metrics hook {self.metrics_hook.ref}" if self.metrics_hook
                               else "the kit's own count, per sample")
        self._metrics = None
        self.memory_series = ("tf.config.experimental.get_memory_info('GPU:0')['current']" if self.gpus
                              else "process resident memory (VmRSS)")
        # environment.settings: read now; the loader's at build, and what the model runs as at its first step
        self.settings = framework_settings(self.gpus)
        # At N devices: MirroredStrategy over them (its devices are fixed once TensorFlow has started)
        self.mirrored = Mirrored(spec) if spec.devices > 1 else None

    def environment(self) -> dict:
        build = tf.sysconfig.get_build_info()
        gpu = bool(self.gpus)
        return {
            "framework": "tensorflow",
            "framework_version": tf.__version__,
            "keras_version": keras.__version__,
            "build": {"cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version")},
            "python": platform.python_version(),
            "numpy": np.__version__,
            "device": "gpu" if gpu else "cpu",
            "device_name": (tf.config.experimental.get_device_details(self.gpus[0]).get("device_name", "GPU")
                            if gpu else cpu_name()),
            # TensorFlow names no UUID; its PCI bus id lets the NVML sampler watch this very GPU
            "device_pci_bus_id": _pci_bus_id() if gpu else None,
            "gpus": nvidia_smi() if gpu else [],
            "gpu_count": len(self.gpus),
            "cpu_threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                            "inter_op": tf.config.threading.get_inter_op_parallelism_threads()},
            "settings": self.settings,
            "tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
            # one switch in TensorFlow for both
            "tf32_ops": dict.fromkeys(("matmul", "convolution"),
                                      tf.config.experimental.tensor_float_32_execution_enabled()),
            # TensorFlow autotunes cuDNN unless TF_CUDNN_USE_AUTOTUNE is set to 0 (its documented default)
            "cudnn_autotune": os.environ.get("TF_CUDNN_USE_AUTOTUNE", "1") not in ("0", "false", "False"),
            "precision": {"requested": self.spec.numerics.precision,
                          "compute_dtype": keras.mixed_precision.global_policy().compute_dtype,
                          "how": f"Keras policy {keras.mixed_precision.global_policy().name}"},
        }

    def build(self, arrays) -> dict:
        # At N devices the model's and the optimizer's variables are mirrored on each of them.
        with self.mirrored.scope() if self.mirrored else contextlib.nullcontext():
            self._build_model()
        # The posted models end in softmax and use categorical cross-entropy on their probabilities;
        # integer labels with the sparse form of the same loss are a declared adaptation.
        posted = any(self.pitfalls.has(p) for p in (Pitfall.TF_POSTED_MODEL, Pitfall.TF_POSTED_VGG16,
                                                     Pitfall.TF_KERAS_APPLICATIONS_RESNET50))
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=not posted)
        # One trace per input dtype and shape: uint8 batches here, float batches of one from the posted pipeline.
        # With numerics.compile, XLA compiles each trace (jit_compile), in the warmup where every shape is met first.
        jit = True if self.spec.numerics.compile else None
        step = self.mirrored.step(self) if self.mirrored else self._train_step
        self._train = tf.function(step, reduce_retracing=True, jit_compile=jit)
        self._eval = tf.function(self._eval_step, reduce_retracing=True, jit_compile=jit)
        shuffle = self.spec.data.shuffle and not self.pitfalls.has(Pitfall.TF_SHUFFLE_IGNORED)
        resume = self.pitfalls.has(Pitfall.TF_EPOCHS_RESUME)
        single = self.pitfalls.has(Pitfall.TF_VALIDATION_SINGLE_EXAMPLES)
        numpy_feeder = NumpyFeeder(arrays, self.spec, self._to_device, shuffle=shuffle, resume=resume,
                                   eval_batch_size=1 if single else None, many=(self._together(arrays),
                                                                                self._to_device_many))
        if self.input_hook:
            self.feeder = HookFeeder(self.input_hook, arrays, self.spec, self._to_device)
            self.input_reader = f"the user's input hook {self.input_hook.ref}"
        elif self.pitfalls.has(Pitfall.TF_BATCH_OF_ONE):
            self.feeder = PostedFeeder(arrays, self.spec, self.scale, shuffle, resume, single, numpy_feeder)
            self.input_reader = self.feeder.reader
        else:
            self.feeder = numpy_feeder
            self.input_reader = NumpyFeeder.READER
        self.settings.update(self._loader_settings())
        return {"parameters": models.parameter_counts(self.model)}

    def _build_model(self) -> None:
        cfg, train = self.spec.model, self.spec.train
        self.model = models.build(cfg, self.spec.data.input_size, self.pitfalls)
        opt = train.optimizer
        if opt.name == "adam":
            self.optimizer = keras.optimizers.Adam(learning_rate=opt.lr, beta_1=opt.beta1,
                                                   beta_2=opt.beta2, epsilon=opt.epsilon)
        else:
            self.optimizer = keras.optimizers.SGD(learning_rate=opt.lr, momentum=opt.momentum,
                                                  nesterov=opt.nesterov)
        if keras.mixed_precision.global_policy().compute_dtype == "float16":
            # fp16 needs its loss scaled (Keras's dynamic loss scaling); a float64 rebuild has no fp16 policy
            self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
        self.optimizer.build(self.model.trainable_variables)

    def _loader_settings(self) -> dict:
        """How batches reach the step: the posted tf.data pipeline's own stages, or the kit's feeder (in the
        training loop, nothing prefetched)."""
        if self.input_hook:
            why = f"the user's input hook {self.input_hook.ref} yields the batches: its loader is not seen"
            return dict.fromkeys(("loader.workers", "loader.prefetch", "loader.pin_memory"),
                                 settings_lib.not_reported(why))
        if isinstance(self.feeder, PostedFeeder):
            return pipeline_settings(self.feeder.train_ds)
        where = "the kit's feeder slices each batch in the training loop"
        return {"loader.workers": settings_lib.read(0, where),
                "loader.prefetch": settings_lib.read(0, f"{where}: nothing is prepared ahead"),
                "loader.pin_memory": NO_PINNING}

    def training_flops(self) -> dict:
        """Training FLOPs per sample of the model built, counted once before training (a traced graph:
        nothing runs; the memory phases start after it)."""
        return trace.training_flops(self.model, self.spec.data.input_size)

    def _to_device(self, x: np.ndarray, y: np.ndarray):
        return tf.convert_to_tensor(x), tf.convert_to_tensor(y)

    def _together(self, arrays) -> int:
        """Training batches converted at a time: up to 8, within 32 MiB."""
        batch_bytes = self.spec.train.batch_size * (arrays.x_train[:1].nbytes + arrays.y_train[:1].nbytes)
        return max(1, min(8, (32 << 20) // max(1, batch_bytes)))

    def _to_device_many(self, x: np.ndarray, y: np.ndarray, sizes: list[int]):
        # One conversion and one split for several batches: each eager op between two steps cost about 0.5 ms on the
        # 2-core CPU (the step's threads still hold the cores), 2% of a 22 ms VGG step. On the host, as one batch's
        # conversion leaves it: the step copies its own batch to a GPU.
        with tf.device("/CPU:0"):
            return zip(tf.split(tf.convert_to_tensor(x), sizes), tf.split(tf.convert_to_tensor(y), sizes))

    def _inputs(self, x: tf.Tensor) -> tf.Tensor:
        if x.dtype != tf.uint8:
            return x          # already resized (and scaled, or not) by the posted pipeline
        x = tf.cast(x, tf.float32) * self.scale
        if self.resize:
            x = tf.image.resize(x, (self.resize, self.resize), method="bilinear", antialias=False)
        return x

    def _train_step(self, x, y):
        with tf.GradientTape() as tape:
            logits = tf.cast(self.model(self._inputs(x), training=True), tf.float32)
            loss = self.loss_fn(y, logits)
            scaled = self.optimizer.scale_loss(loss)      # the loss itself but under a LossScaleOptimizer
        grads = tape.gradient(scaled, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self._count(logits, y, loss)
        return logits, loss

    def _eval_step(self, x, y):
        inputs = self._inputs(x)
        outputs = self.evaluate_hook(self.model, inputs) if self.evaluate_hook else self.model(inputs, training=False)
        logits = tf.cast(outputs, tf.float32)
        loss = self.loss_fn(y, logits)
        self._count(logits, y, loss)
        return logits, loss

    def _count(self, logits, y, loss) -> None:
        """The kit's own count from the outputs it saw, in on-device sums."""
        n = tf.cast(tf.shape(y)[0], tf.float32)
        self._loss_sum.assign_add(loss * n)
        self._correct.assign_add(tf.reduce_sum(tf.cast(tf.argmax(logits, 1) == y, tf.int64)))

    def train_step(self, batch) -> None:
        if "execution" not in self.settings:       # once: what the first step runs with (a builder may switch)
            self.settings.update(framework_settings(self.gpus), **model_settings(self.model, self._train))
        if self._probe is None:       # once, in the warmup: an extra forward pass that reads values back
            out = self.model(self._inputs(batch[0]), training=False)
            self._probe = {"expects_logits": bool(self.loss_fn.from_logits), "rows": int(out.shape[0]),
                           "nonnegative": bool(tf.reduce_all(out >= 0)),
                           "max_row_sum_error": float(tf.reduce_max(tf.abs(tf.reduce_sum(out, 1) - 1)))}
        if self.mirrored is not None:      # at N: split among the replicas (logits gathered for a metrics hook only)
            logits, loss = self.mirrored.train(self._train, *batch)
        else:
            logits, loss = self._train(*batch)
        self._loss_dtype = self._loss_dtype or loss.dtype.name
        self._last_loss = loss
        if self._metrics is not None:
            self._metrics.update(logits, batch[1], loss)

    def at_n(self) -> dict | None:
        """None at one device; at N how the steps were split, and the first step's evidence
        (reprokit/kits/training_loop/distributed.py)."""
        return self.mirrored.at_n(self.model) if self.mirrored is not None else None

    def eval_step(self, batch) -> None:
        logits, loss = self._eval(*batch)
        self._last_loss = loss
        if self._metrics is not None:
            self._metrics.update(logits, batch[1], loss)

    def set_mode(self, training: bool) -> None:
        """Keras has no global mode (each step passes training=True or False to the model): a phase
        starts only the user's metrics."""
        self._metrics = self.metrics_hook() if self.metrics_hook else None

    def reported(self) -> dict | None:
        return self._metrics.result() if self._metrics is not None else None

    def end_epoch(self, train_loss_sum: float) -> None:
        """No scheduler on the TensorFlow side (the post had none)."""

    def take_sums(self) -> tuple[float, float]:
        loss, correct = float(self._loss_sum.numpy()), float(self._correct.numpy())
        self._loss_sum.assign(0.0)
        self._correct.assign(0)
        return loss, correct

    def step_timer(self, k: int) -> WindowTimer:
        # TensorFlow has no event API: windows of k steps, synchronised at their edges.
        return WindowTimer(k, self.sync)

    def sync(self) -> None:
        # TensorFlow has no event API: reading the last step's loss waits for it (on a GPU, for the queue up to it).
        # A tensor the step returned is read without an op; reading a variable runs one, which between steps cost
        # 1-3% of a 22 ms VGG step on the 2-core CPU (the step's threads still hold the cores).
        (self._loss_sum if self._last_loss is None else self._last_loss).numpy()

    def matmul_flops_per_s(self, n: int = 1024) -> float:
        """The device's measured fp32 matmul rate with the run's thread settings: a peak to hold throughput against."""
        a = tf.random.normal((n, n))
        b = tf.random.normal((n, n))
        return cpu_peak.best_rate(lambda: a @ b, lambda c: tf.reduce_sum(c).numpy(), 2.0 * n**3)

    def no_gpu_reason(self) -> str:
        build = tf.sysconfig.get_build_info()
        cuda = (f"built for CUDA {build['cuda_version']} and cuDNN {build.get('cudnn_version')}"
                if build.get("cuda_version") else "a build without CUDA (tensorflow-cpu)")
        return f"tf.config.list_physical_devices('GPU') is empty; this TensorFlow is {cuda}"

    def observed(self) -> dict:
        # Keras takes the mode per call and the eval step has no tape: the kit passes training=True
        # to every train step and training=False, without a tape, to every eval step.
        scaling = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        return {"loss_input_probe": self._probe, "loss_dtype": self._loss_dtype,
                "loss_scale": float(self.optimizer.dynamic_scale.numpy()) if scaling else None}

    def memory_now(self) -> int:
        if self.gpus:
            return int(tf.config.experimental.get_memory_info("GPU:0")["current"])
        return rss_bytes()

    def memory_counters(self) -> list:
        return [_AllocatorPeak()] if self.gpus else []


class _AllocatorPeak:
    """TensorFlow's allocator peak on the GPU (memory growth on) for a phase: reset at its start, read at its end."""

    def reset(self, _phase: str) -> None:
        tf.config.experimental.reset_memory_stats("GPU:0")

    def read(self) -> dict:
        return {"allocated": {"peak_bytes": int(tf.config.experimental.get_memory_info("GPU:0")["peak"]),
                              "source": "tf.config.experimental.get_memory_info('GPU:0')['peak'] (memory growth "
                                        "on), reset at the phase's start by reset_memory_stats, read at its end"}}


def _pci_bus_id() -> str | None:
    """The PCI bus id of TensorFlow's first GPU, from its physical device description
    ("device: 0, name: ..., pci bus id: 0000:00:04.0, compute capability: 8.0")."""
    from tensorflow.python.client import device_lib

    for d in device_lib.list_local_devices():
        if d.device_type == "GPU":
            found = re.search(r"pci bus id: ([0-9a-fA-F:.]+)", d.physical_device_desc)
            return found.group(1) if found else None
    return None

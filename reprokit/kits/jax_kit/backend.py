"""JAX (Flax NNX, Optax) behind the shared Backend interface.

One ``jax.jit`` training step over the whole train state (reprokit/kits/jax_kit/steps.py), the state donated to every
step; the host waits only where the common loop asks (``sync``, ``take_sums``: ``jax.block_until_ready`` and
one read of the sums) and at the step clock's edges, each read with the next step already queued
(reprokit/kits/jax_kit/step_clock.py). Every batch shape the run gives is
compiled ahead of time in the warmup, and the compilations are recorded apart (environment.compilation).
XLA's environment (allocator, threads, autotuning) is set from the spec before JAX starts a backend.
At N devices (a spec's ``devices``) the step is a per-device step over a mesh of N devices
(reprokit/kits/jax_kit/sharded.py); at one device nothing of it runs.
"""
from __future__ import annotations

import collections
import platform
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from reprokit.kits.contract import settings as settings_lib
from reprokit.kits.contract.spec import FRAMEWORK_DEFAULT, RunSpec
from reprokit.kits.framework_free import cpu_peak, custom
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.framework_free.environment import cpu_name, nvidia_smi
from reprokit.kits.jax_kit import memory, models, sharded, steps, trace, xla_env
from reprokit.kits.jax_kit.read_settings import NO_PINNING, framework_settings, intra_op_threads, model_settings
from reprokit.kits.jax_kit.step_clock import CompletionTimer
from reprokit.kits.training_loop.feeding import FeederMixin, HookFeeder, NumpyFeeder

PREFETCH = 2          # batches on their way to the device ahead of the step that takes them


class Backend(FeederMixin):
    name = "jax"

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        numerics = spec.numerics
        self.xla_env = xla_env.configure(spec)
        if spec.device != "gpu" and not xla_env.started():
            jax.config.update("jax_platforms", "cpu")      # a CPU run never initialises a GPU it may find
        # FRAMEWORK_DEFAULT leaves XLA's own: DEFAULT precision, TF32 on GPUs that have it.
        if numerics.tf32 != FRAMEWORK_DEFAULT:
            jax.config.update("jax_default_matmul_precision", "tensorfloat32" if numerics.tf32 else "highest")
        gpus = _gpus() if spec.device == "gpu" else []
        self.device = gpus[0] if gpus else jax.devices("cpu")[0]
        self.gpu = bool(gpus)
        # At N devices a mesh of the first N; a GPU run that finds no GPU is refused by the runner with JAX's reason.
        self.mesh = (sharded.Devices(spec, gpus or jax.devices("cpu"))
                     if spec.devices > 1 and (gpus or spec.device != "gpu") else None)
        self._zero_sums = self.mesh.zero_sums if self.mesh else steps.zero_sums
        data = spec.data
        self.scale, self.resize = data.unit_scale, data.resize_to
        self.input_hook = custom.hook(spec, "input", "jax")
        self.evaluate_hook = custom.hook(spec, "evaluate", "jax")
        self.metrics_hook = custom.hook(spec, "metrics", "jax")
        self.metrics_source = (f"the user's metrics hook {_named(self.metrics_hook)}" if self.metrics_hook
                               else "the kit's own count, per sample")
        self._metrics: Any = None
        self._training: bool | None = None
        self._train_steps = 0
        self._probe: dict[str, Any] | None = None
        self.memory_series = ("device.memory_stats()['bytes_in_use']" if self.gpu
                              else "process resident memory (VmRSS)")
        # what XLA compiled and when: read into the result through environment() (filled during the warmup)
        self.compilation: list[dict[str, Any]] = []
        self.settings = framework_settings(self.gpu)

    def environment(self) -> dict[str, Any]:
        import flax
        import optax
        return {
            "framework": "jax",
            "framework_version": jax.__version__,
            "jaxlib_version": jax.lib.__version__ if hasattr(jax.lib, "__version__") else None,
            "flax_version": flax.__version__,
            "optax_version": optax.__version__,
            "build": _build(self.gpu),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "device": "gpu" if self.gpu else "cpu",
            "device_name": self.device.device_kind if self.gpu else cpu_name(),
            "device_uuid": None,            # JAX names no UUID or PCI bus id of its devices
            "gpus": nvidia_smi() if self.gpu else [],
            "gpu_count": len(_gpus()) if self.gpu else 0,
            # XLA has no inter-op pool: None, not a count (environment.settings says why)
            "cpu_threads": {"intra_op": intra_op_threads(), "inter_op": None},
            "settings": self.settings,
            "tf32": self.settings["tf32.matmul"]["value"],
            "tf32_ops": dict.fromkeys(("matmul", "convolution"), self.settings["tf32.matmul"]["value"]),
            "cudnn_autotune": self.settings["cudnn_autotune"]["value"],
            "precision": {"requested": self.spec.numerics.precision, "compute_dtype": self._compute_dtype(),
                          "how": "Flax layers' dtype=bfloat16 over float32 parameters" if self._bf16()
                          else "float32 throughout"},
            "xla_environment": dict(self.xla_env),
            "compilation": {"when": "ahead of time, per batch shape, in the warmup (not in any timed phase)",
                            "compiled": self.compilation},
        }

    def _bf16(self) -> bool:
        return models.compute_dtype(self.spec) is not None

    def _compute_dtype(self) -> str:
        return "bfloat16" if self._bf16() else "float32"

    def build(self, arrays: datalib.Arrays) -> dict[str, Any]:
        from flax import nnx
        spec = self.spec
        with jax.default_device(self.device):
            self.model = models.build(spec)
            opt = nnx.Optimizer(self.model, steps.optimizer(spec.train.optimizer), wrt=nnx.Param)
            self.graphdef, self.state = nnx.split((self.model, opt))
            self.sums = steps.zero_sums()
        phase = self._phase
        if self.mesh:
            self.state, self.sums = self.mesh.replicate(self.state), self.mesh.zero_sums()
            self.mesh.built(self.model)
            train = sharded.train_step(self.graphdef, self.scale, self.resize, self.mesh.mesh)
        else:
            train = steps.train_step(self.graphdef, self.scale, self.resize, outputs=self.metrics_hook is not None)
        self._train = steps.Compiled(train, "train", self.compilation, phase)
        self._eval = steps.Compiled(steps.eval_step(self.graphdef, self.scale, self.resize), "eval",
                                    self.compilation, phase)
        self._count = steps.count_step()
        self._train_sizes = _train_sizes(spec, len(arrays.x_train)) if not self.input_hook else []
        if self.mesh:
            sharded.refused(spec, self.input_hook, self._train_sizes)
        if self.input_hook:
            self.feeder: Any = HookFeeder(self.input_hook, arrays, spec, self._to_device)
            self.input_reader = f"the user's input hook {_named(self.input_hook)}"
        else:
            self.feeder = NumpyFeeder(arrays, spec, self.mesh.train_put if self.mesh else self._to_device)
            self.input_reader = NumpyFeeder.READER
        # at N the evaluation batches go whole onto every device, for the replicated model
        self._evaluation = NumpyFeeder(arrays, spec, self.mesh.eval_put) if self.mesh else self.feeder
        self.settings.update(self._loader_settings())
        return {"parameters": models.parameter_counts(self.model)}

    def _phase(self) -> str:
        return "warmup" if self._train_steps < self.spec.train.warmup_steps else (
            "training" if self._training else "evaluation")

    def _loader_settings(self) -> dict[str, Any]:
        if self.input_hook:
            why = f"the user's input hook {_named(self.input_hook)} yields the batches: its loader is not seen"
            return dict.fromkeys(("loader.workers", "loader.prefetch", "loader.pin_memory"),
                                 settings_lib.not_reported(why))
        where = "the kit's feeder slices each batch in the training loop"
        return {"loader.workers": settings_lib.read(0, where),
                "loader.prefetch": settings_lib.read(PREFETCH - 1, f"{where}; jax.device_put sends the next "
                                                     f"batch before the step takes this one"),
                "loader.pin_memory": NO_PINNING}

    def training_flops(self) -> dict[str, Any]:
        """Training FLOPs per sample of the model built, from its traced jaxpr (nothing runs)."""
        return trace.training_flops(self.model, self.spec.data.input_size)

    def _to_device(self, x: Any, y: Any) -> tuple[jax.Array, jax.Array]:
        return jax.device_put(x, self.device), jax.device_put(y, self.device)

    def train_batches(self, epoch: int) -> Iterator[Any]:
        """The feeder's batches, the next already on its way to the device (jax.device_put returns at once)."""
        ahead: collections.deque[Any] = collections.deque()
        for batch in self.feeder.train(epoch):
            ahead.append(batch)
            if len(ahead) == PREFETCH:
                yield ahead.popleft()
        yield from ahead

    def test_batches(self) -> Iterator[Any]:
        return self._evaluation.test()

    def warm_test_batches(self) -> Iterator[Any]:
        return self._evaluation.warm_test()

    def _compile_training_shapes(self, x: jax.Array, y: jax.Array) -> None:
        """Every training batch shape of the run, compiled in the warmup: the full batch and a partial last one."""
        for size in self._train_sizes:
            shapes = [jax.ShapeDtypeStruct((size, *a.shape[1:]), a.dtype) for a in (x, y)]
            self._train.compile(self.state, self.sums, *shapes)

    def train_step(self, batch: Any) -> None:
        x, y = batch
        first = self._train_steps == 0
        if first:
            self._compile_training_shapes(x, y)
            self._first_step(x, y)
        out = self._train(self.state, self.sums, x, y)
        self.state, self.sums = out[0], out[1]
        if first and self.mesh:
            self.mesh.first_step(x, y, out)
        self._train_steps += 1
        if self._metrics is not None:
            self._metrics.update(out[2], y, out[3])

    def _first_step(self, x: jax.Array, y: jax.Array) -> None:
        """Once, in the warmup: what the step runs as, and whether the loss's inputs look like logits (an
        evaluation-mode forward pass that reads values back)."""
        self.settings.update(framework_settings(self.gpu), **model_settings(self.model, self._train.jitted,
                                                                              self._compute_dtype()))
        whole = self.mesh.eval_put(x, y) if self.mesh else (x, y)       # at N the evaluation step's replicated batch
        _, logits, _ = self._eval(self.state, self._zero_sums(), *whole)
        out = np.asarray(logits)
        self._probe = {"expects_logits": True, "rows": int(out.shape[0]), "nonnegative": bool((out >= 0).all()),
                       "max_row_sum_error": float(np.abs(out.sum(1) - 1).max())}

    def eval_step(self, batch: Any) -> None:
        x, y = batch
        if self.evaluate_hook:
            from flax import nnx
            model, _ = nnx.merge(self.graphdef, self.state)
            model.eval()
            logits = self.evaluate_hook(model, steps.inputs(x, self.scale, self.resize))
            self.sums, loss = self._count(self.sums, logits, y)
        else:
            self.sums, logits, loss = self._eval(self.state, self.sums, x, y)
        if self._metrics is not None:
            self._metrics.update(logits, y, loss)

    def set_mode(self, training: bool) -> None:
        """Modes live inside the jitted steps (the train step runs the model in training mode, the eval step in
        evaluation mode): a phase starts only the user's metrics."""
        self._training = training
        self._metrics = self.metrics_hook() if self.metrics_hook else None

    def reported(self) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._metrics.result() if self._metrics is not None else None
        return result

    def end_epoch(self, train_loss_sum: float) -> None:
        """No scheduler in a JAX run."""

    def take_sums(self) -> tuple[float, float]:
        loss, correct = jax.device_get(self.sums)
        self.sums = self._zero_sums()
        return float(loss), float(correct)

    def step_timer(self, k: int) -> CompletionTimer:
        # windows of k steps, each edge read once the next step is queued: the device never waits for the clock
        return CompletionTimer(k, self.sync, lambda: self.sums)

    def sync(self) -> None:
        jax.block_until_ready((self.state, self.sums))

    def memory_now(self) -> int:
        return memory.in_use(self.device)

    def memory_counters(self) -> list[Any]:
        return [memory.DevicePeak(self.device)] if self.gpu else []

    def matmul_flops_per_s(self, n: int = 1024) -> float:
        """The device's measured fp32 matmul rate with the run's thread settings (jitted, synchronised)."""
        with jax.default_device(self.device):
            a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
            b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
        mm = jax.jit(jnp.matmul)
        return cpu_peak.best_rate(lambda: mm(a, b), lambda c: c.block_until_ready(), 2.0 * n**3)

    def observed(self) -> dict[str, Any]:
        # The modes are fixed inside the jitted steps: training mode in every train step, evaluation mode
        # without gradients in every evaluation step.
        return {"loss_input_probe": self._probe, "loss_dtype": "float32"}

    def at_n(self) -> dict[str, Any] | None:
        """None at one device; at N how the mesh split the run, and its first step's evidence."""
        return self.mesh.at_n() if self.mesh else None

    def no_gpu_reason(self) -> str:
        try:
            jax.devices("gpu")
        except RuntimeError as exc:      # JAX's own words: no CUDA plugin, no driver, no device
            return custom.one_line(exc)
        return "jax.devices('gpu') lists devices, but the run is on the CPU"


def _named(hook: Any) -> str:
    """How a result names the user's hook (custom.hook keeps its "module:function")."""
    return str(hook.ref)


def _gpus() -> list[Any]:
    try:
        return list(jax.devices("gpu"))
    except RuntimeError:            # no GPU backend: a CPU jaxlib, or no driver
        return []


def _build(gpu: bool) -> dict[str, Any]:
    """The CUDA and cuDNN versions of the GPU plugin JAX loaded (none on a CPU)."""
    if not gpu:
        return {"cuda": None, "cudnn": None}
    from jax._src.lib import cuda_versions  # present where the CUDA plugin is
    if cuda_versions is None:
        return {"cuda": None, "cudnn": None}
    return {"cuda": str(cuda_versions.cuda_runtime_get_version()), "cudnn": str(cuda_versions.cudnn_get_version())}


def _train_sizes(spec: RunSpec, n_train: int) -> list[int]:
    """The batch sizes the kit's feeder gives in training: full batches, and a partial last one where the
    data does not drop it and the epoch reaches it."""
    batch = spec.train.batch_size
    sizes = [min(batch, n_train)]
    rest = n_train % batch
    full = n_train // batch
    cap = spec.train.max_steps_per_epoch
    if rest and not spec.data.drop_last and (cap is None or cap > full):
        sizes.append(rest)
    return sizes

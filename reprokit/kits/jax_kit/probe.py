"""JAX's side of the probe: the framework's own hooks, installed before the script's first line.

A JAX script's training is the jitted functions it calls (reprokit/kits/jax_kit/probe_steps.py says how the probe
tells its training step, its evaluation and the batches each received). Observation hooks (they change
nothing the script computes; its functions are traced once each before their first call, a trace JAX
keeps for the call that follows):
- jax.jit and flax.nnx.jit, for the functions the script's own files jit: each call of the training
  step is a training step (a forward pass and an optimizer step), each call of an evaluation a forward
  pass without a step; the first call per input shape compiles, and is counted and timed;
- optax.apply_updates (what nnx.Optimizer.update calls), jax.grad and jax.value_and_grad: marked where
  they run inside such a trace; flax.linen's Module.apply there too (the linen model a step trains);
- the device waited for (jax.block_until_ready on the last call's outputs) at each timing window's and
  phase's edges, as in a kit run, and nowhere else.
Not observed: the loss (it is inside the compiled step; counting it would add outputs to the script's own
program), the host synchronisations of the script's own code, and a loop that steps without jit.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

# JAX takes 75% of a GPU at its start unless told otherwise; XLA reads this when it starts, after the import.
PREALLOCATE_SET = "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jaxlib  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from reprokit.kits import served_data  # noqa: E402
from reprokit.kits.contract import settings as settings_lib  # noqa: E402
from reprokit.kits.contract import work_folder  # noqa: E402
from reprokit.kits.framework_free import certificate as cert  # noqa: E402
from reprokit.kits.framework_free import model_call  # noqa: E402
from reprokit.kits.framework_free.measure import rss_bytes  # noqa: E402
from reprokit.kits.jax_kit import first_call, memory  # noqa: E402
from reprokit.kits.jax_kit.linen_captured import Found, find  # noqa: E402
from reprokit.kits.jax_kit.probe_steps import EVAL, LOGITS_LOSS, TRAIN, Tracing, Watched, hook_traces, jit_hook  # noqa: E402
from reprokit.kits.jax_kit.read_settings import NO_PINNING, framework_settings, model_settings  # noqa: E402
from reprokit.kits.observation.observe import Observer, own_time  # noqa: E402
from reprokit.kits.training_loop.staged_data import StagedData  # noqa: E402

CIFAR10_BATCHES = "cifar-10-batches-py"


class JaxProbe:
    HOOKS = ("jax.jit and flax.nnx.jit of the script's own functions: each traced once before its first call (the "
             "trace JAX keeps for that call); its calls are the training steps (a trace that updates parameters) "
             "and evaluations (a function given the trained state), each call's batch from its array arguments",
             "optax.apply_updates (nnx.Optimizer.update calls it), jax.grad and jax.value_and_grad: marked inside "
             "those traces; optax's softmax cross-entropies too (the certificate's loss of logits), and flax.linen's "
             "Module.apply (the linen module a step applies, and how)",
             "each function's executables counted after each call: a call that compiled is counted and timed",
             "the device waited for (jax.block_until_ready on the last call's outputs) at each timing window's and "
             "phase's edges")

    def __init__(self, script_dir: Path) -> None:
        self.script_dir = str(script_dir)
        self.observer: Observer = None  # type: ignore[assignment]   # install() gives it, before the script runs
        self.tracing = Tracing()
        self.certifying = False
        self.models: list[str] = []
        self.others: list[str] = []
        self.model: nnx.Module | None = None          # the Flax module the training step received, if one
        self.optimizer: nnx.Optimizer | None = None   # ... and the nnx.Optimizer, if one
        self.linen: Found | str | None = None         # else the linen model it applies, or why none is found
        self.first_batch: np.ndarray | None = None    # the first samples of the first step's inputs
        self.batch_devices: int | None = None         # the devices its batch was split over (a JAX mesh)
        self.step: Watched | None = None              # the first training step seen
        self.call: model_call.ModelCall | str | None = None     # how it called the NNX model it trains, or why not
        self.compilations: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self._last: Any = None                        # the last observed call's outputs: what a sync waits for
        self._trained: tuple[Any, list[Any]] | None = None    # the last training step's outputs and Flax objects
        self._first_update: list = []

    # -- what the run uses -----------------------------------------------------------------------------

    def sync(self) -> None:
        """Wait for the last call's outputs (the device runs the script's calls in order, each on the last)."""
        live = [x for x in jax.tree.leaves(self._last) if isinstance(x, jax.Array) and not x.is_deleted()]
        jax.block_until_ready(live)

    def _device(self):
        """Where the trained state is: the step's outputs, or the Flax module's (a step may return nothing)."""
        state = nnx.state(self.model, nnx.Param) if self.model is not None else None
        arrays = [x for x in jax.tree.leaves((self._trained[0] if self._trained else None, state))
                  if isinstance(x, jax.Array)]
        return next(iter(arrays[0].devices())) if arrays else None

    def on_gpu(self) -> bool:
        device = self._device()
        return device is not None and device.platform == "gpu"

    def memory_now(self) -> int:
        device = self._device()
        return memory.in_use(device) if device is not None else rss_bytes()

    def device_ids(self) -> tuple[str | None, str | None]:
        """(no UUID: JAX reports none, the trained state's GPU's PCI bus id where XLA gives it) for NVML."""
        device = self._device()
        return None, getattr(device, "pci_bus_id", None) if self.on_gpu() else None

    def gpu_counters(self) -> list:
        return [_FirstGpuPeak()]

    def memory_series(self) -> str:
        return "device.memory_stats()['bytes_in_use']" if self.on_gpu() else "process resident memory (VmRSS)"

    def sync_meaning(self) -> str:
        return "not observed in JAX scripts (the probe does not count the script's own host reads)"

    def as_float(self, value) -> float:
        return float(np.asarray(value))

    def stage_data(self, named: StagedData, tfds_root: Path | None) -> list[str]:
        """JAX has no dataset reader: a script reads CIFAR-10's python batches itself, where their tarball unpacks
        (``data/cifar-10-batches-py`` or ``cifar-10-batches-py`` in its folder): linked there where absent. The
        libraries a script imports (torchvision, keras, TFDS, where its requirements bring them) and the published
        files by URL serve the named datasets as in any framework's run (reprokit/kits/served_data/)."""
        work = Path(self.script_dir)             # the script's writable copy of its folder
        linked = []
        for where in (work / "data" / CIFAR10_BATCHES, work / CIFAR10_BATCHES):
            if not where.exists():
                where.parent.mkdir(parents=True, exist_ok=True)
                where.symlink_to(named.cifar("cifar10"))
                linked.append(str(where.relative_to(work)))
        shims = [f"CIFAR-10's python batches linked at {', '.join(linked)} in the script's folder (where its tarball "
                 f"unpacks; JAX has no dataset reader of its own)"] if linked else []
        shims += served_data.install(named, tfds_root)
        if PREALLOCATE_SET:
            shims.append("XLA_PYTHON_CLIENT_PREALLOCATE=false (the script's environment set none): JAX would take 75% "
                         "of a GPU at its start, and no memory reading would mean anything")
        return shims

    # -- installing ------------------------------------------------------------------------------------

    def install(self, observer: Observer) -> None:
        self.observer = observer
        hook_traces(self.tracing)
        own = work_folder.own_files(Path(self.script_dir))       # the script's own code (a notebook's cells too)
        jax.jit = jit_hook(jax.jit, self, own)
        nnx.jit = jit_hook(nnx.jit, self, own)

    @own_time
    def _before(self, fn: Watched, args: tuple, kwargs: dict) -> None:
        obs = self.observer
        if fn.kind == TRAIN:
            if self.step is None:
                self._found(fn, args)
            obs.forward(fn.batch(args, kwargs, set()) or 0, True, True)
            obs.step_begins()
        else:
            trained = self._trained_ids() if fn.state_args is None else set()
            batch = fn.batch(args, kwargs, trained)
            if fn.kind == EVAL:
                obs.forward(batch or 0, False, False)

    def called(self, fn: Watched, args: tuple, kwargs: dict) -> Any:
        """One call of a watched function, as the script made it, between the Observer's events."""
        self._before(fn, args, kwargs)
        out, compiled_s = fn.run(args, kwargs)
        self._after(fn, args, out, compiled_s)
        return out

    @own_time
    def _after(self, fn: Watched, args: tuple, out: Any, compiled_s: float | None) -> None:
        obs = self.observer
        if compiled_s is not None and fn.kind in (TRAIN, EVAL):
            self._record_compile(fn, compiled_s)
        if fn.kind == TRAIN:
            self._trained = out, [a for a in args if isinstance(a, (nnx.Module, nnx.Optimizer))]
            self._last = self._trained        # a Flax step may return nothing: its module's new state is waited for
            obs.step_ends()
        elif fn.kind == EVAL:
            self._last = out

    def _record_compile(self, fn: Watched, seconds: float) -> None:
        """A call that compiled (its first per input shape): in the warmup steps, or named where it was measured."""
        obs = self.observer
        self.compilations.append({"function": fn.name, "kind": fn.kind, "call": fn.calls, "phase": obs.phase,
                                  "after_training_steps": obs.steps, "seconds": seconds})
        if fn.kind == TRAIN and obs.t_measured is not None:
            self.notes.append(f"{fn.name} compiled again at training step {obs.steps + 1} (a new input shape), inside "
                              f"the measured steps: {seconds:.3f} s of its time is XLA's compilation")

    def _trained_ids(self) -> set[int]:
        if self._trained is None:
            return set()
        out, graphs = self._trained
        return {id(x) for x in jax.tree.leaves(out)} | {id(g) for g in graphs}

    def _found(self, fn: Watched, args: tuple) -> None:
        """The first training step: the Flax module it received, or the parameters its update stepped."""
        self.step = fn
        modules = [a for a in args if isinstance(a, nnx.Module)]
        optimizers = [a for a in args if isinstance(a, nnx.Optimizer)]
        self.model = modules[0] if modules else getattr(optimizers[0], "model", None) if optimizers else None
        self.optimizer = optimizers[0] if optimizers else None
        inputs = [a for i, a in enumerate(args) if i not in (fn.state_args or ()) and not isinstance(a, nnx.Pytree)]
        batch = next((x for x in jax.tree.leaves(inputs) if getattr(x, "ndim", 0) >= 2), None)
        # a copy of its first samples now: the step may donate its buffers (on the host first: slicing a batch
        # sharded over an explicit mesh is a gather JAX refuses)
        self.first_batch = None if batch is None else np.array(np.asarray(batch)[:cert.LOGITS_SAMPLES])
        sharding = getattr(batch, "sharding", None)          # a batch split over a mesh: one share per device
        self.batch_devices = len(sharding.device_set) if sharding is not None else 1
        if jax.process_count() > 1:                           # a multi-process run (jax.distributed.initialize)
            self.group = {"rank": jax.process_index(), "ranks": jax.process_count(), "backend": None}
        if self.model is not None:
            try:
                self.call = first_call.record(self.model, fn.model_calls, args, fn.loss_inputs)
            except model_call.Unreplayable as exc:
                self.call = str(exc)
            self.models.append(f"{type(self.model).__name__} with {self.parameters()['total']:,} parameters")
            self.others = [f"{type(m).__name__}" for m in modules[1:]]
            self.models += self.others
        else:
            self.linen = find(fn.name, fn.applied, fn.params, args)
            self.models.append(f"{type(self.linen.applied.module).__name__} (flax.linen) with "
                               f"{self.parameters()['total']:,} parameters" if isinstance(self.linen, Found) else
                               f"a parameter pytree of {self.parameters()['total']:,} parameters, trained by "
                               f"the jitted {fn.name}")

    # -- the certificate -------------------------------------------------------------------------------

    def at_first_update(self, call) -> None:
        """``call()`` before the first training step runs (the Observer's first step)."""
        self.observer.at_first_step.append(call)

    def captured(self, other_input: np.ndarray | None):
        """The model the script trains in the certificate's canonical form: its Flax NNX module
        (reprokit/kits/jax_kit/captured.py) or its linen module with the variables its step applies it with
        (reprokit/kits/jax_kit/linen_captured.py); its input the PyTorch side's batch where the model takes that shape,
        else the first samples of its own."""
        if self.model is None and not isinstance(self.linen, Found):
            raise cert.NotCaptured(self.linen or "the script's training step was not seen")
        if self.first_batch is None:
            raise ValueError("the first training step received no batch of arrays (N, ...) to run the model on")
        from reprokit.kits.jax_kit.captured import Captured
        from reprokit.kits.jax_kit.linen_captured import LinenCaptured
        seen = self.step.seen if self.step else set()
        logits = True if LOGITS_LOSS in seen else None
        if isinstance(self.linen, Found):
            x = self._input(other_input, self.first_batch.shape[1:])
            return LinenCaptured(self.linen, x, logits, f"the JAX script's "
                                 f"{type(self.linen.applied.module).__name__} (flax.linen)")
        if not isinstance(self.call, model_call.ModelCall):
            raise model_call.Unreplayable(self.call or "the script's model call was not seen in its training step")
        batch = next(a.value for a in self.call.args if a.role == model_call.BATCH) \
            if self.call.batch_at[0][0] == "index" else self.call.kwargs[self.call.batch_at[0][1]].value
        shape = tuple(int(d) for d in getattr(batch, "shape", self.first_batch.shape)[1:])
        x = self._input(other_input, shape)
        return Captured(self.model, self.optimizer, x, self.call, logits,
                        f"the JAX script's {type(self.model).__name__}")

    def _input(self, other_input: np.ndarray | None, shape: tuple) -> np.ndarray:
        """The certificate's input: the PyTorch side's batch where the model takes it (reprokit/kits/framework_free/
        model_call.py as_shape), else the first samples of the step's own batch, as the model takes them."""
        x = model_call.as_shape(other_input, shape) if other_input is not None else None
        self.own_input = other_input is not None and x is None
        if x is None:
            x = model_call.as_shape(self.first_batch, shape)
        if x is None:
            raise model_call.Unreplayable(
                f"the script's model takes samples of shape {shape}, and neither the PyTorch side's batch nor its "
                f"step's own ({tuple(self.first_batch.shape[1:])}) has that shape without moving its channels")
        return x

    # -- what it saw -------------------------------------------------------------------------------------

    def finish(self) -> None:
        """Where no training step was seen, say which jitted functions were (a loop without jit sees none)."""
        if self.step is None and not self.notes:
            self.notes.append("no jitted function of the script applied an update (optax.apply_updates) or returned "
                              "its arguments' gradient-updated copy: a loop that trains without jax.jit is not seen")

    def eager_loop(self) -> bool:
        return False

    def input_reader(self) -> str | None:
        return "the script's own loop over its arrays (JAX has no loader)"

    def batchnorm_sync(self) -> str | None:
        """Whether its BatchNorm statistics span the devices: under jit alone over a batch split on several
        devices they do (XLA reduces each mean over the whole batch); in a step mapped per device (shard_map,
        pmap), where a layer names the mapped axis (axis_name). None without one, or for a linen model."""
        if self.model is None:
            return None
        norms = [m for _, m in nnx.iter_modules(self.model) if isinstance(m, nnx.BatchNorm)]
        if not norms:
            return None
        assert self.step is not None and self.batch_devices is not None   # both are set with the model (_found)
        if self.batch_devices > 1 and self.step.per_device is False:
            return "synchronized"
        synced = sum(getattr(m, "axis_name", None) is not None for m in norms)
        return "synchronized" if synced == len(norms) else "per device" if not synced else "mixed"

    def replicas(self) -> int | None:
        """The devices the first training step's batch was split over (a JAX mesh), if it was seen."""
        return self.batch_devices

    def environment(self) -> dict:
        from reprokit.kits.framework_free.environment import cpu_name, nvidia_smi
        device = self._device() or jax.devices()[0]
        gpu = device.platform == "gpu"
        settings = self.settings()
        intra = settings["threads.intra_op"].get("value")
        return {
            "framework": "jax", "framework_version": jax.__version__,
            "build": {"jaxlib": jaxlib.__version__, "cuda": None, "cudnn": None},
            "python": platform.python_version(), "numpy": np.__version__,
            "device": "gpu" if gpu else "cpu",
            "device_name": device.device_kind if gpu else cpu_name(),
            "gpus": nvidia_smi() if gpu else [], "gpu_count": jax.device_count("gpu") if gpu else 0,
            "cpu_threads": {"intra_op": intra, "inter_op": None},
            "settings": settings,
            "data_layout": settings.get("data_layout", {}).get("value"),
            "execution": settings["execution"]["value"],
            "tf32": settings["tf32.matmul"]["value"],
            "tf32_ops": {"matmul": settings["tf32.matmul"]["value"],
                         "convolution": settings["tf32.convolution"]["value"]},
            "cudnn_autotune": settings["cudnn_autotune"]["value"],
            "precision": {"requested": "as the script ran it", "compute_dtype": self._dtype(),
                          "how": "the dtype of the parameters the training step updated"},
        }

    def _dtype(self) -> str:
        leaves = jax.tree.leaves(nnx.state(self.model, nnx.Param)) if self.model is not None else \
            [x for x in jax.tree.leaves(self._trained[0] if self._trained else None) if hasattr(x, "dtype")]
        return str(leaves[0].dtype) if leaves else "float32"

    def settings(self) -> dict:
        """environment.settings as JAX reports them at the script's end (reprokit/kits/jax_kit/read_settings.py), its
        model's where it trained a Flax module, and its loop's (no loader)."""
        out = framework_settings(self.on_gpu())
        why_no_module = ("the script trains a parameter pytree (its own, or a flax.linen module's variables), not "
                         "an NNX module: its layers' layout is not read")
        if self.model is not None:
            out.update(model_settings(self.model, self.step, self._dtype()))
        else:
            out["execution"] = settings_lib.read("jax.jit (XLA)" if self.step else "eager",
                                                 "the training step is a function the script jitted")
            out["precision"] = settings_lib.precision(self._dtype(), self._dtype(), why_no_module)
            out["data_layout"] = settings_lib.layout(None, why_no_module)
        why = "the script's own loop over its arrays (JAX has no loader): each batch is made in the loop"
        out.update({"loader.workers": settings_lib.read(0, why), "loader.prefetch": settings_lib.read(0, why),
                    "loader.pin_memory": NO_PINNING})
        return out

    def parameters(self) -> dict:
        """The Flax module's variables (BatchNorm's statistics in the total, as Keras counts them), or the
        parameters the training step's update stepped (a linen module's other collections in the total)."""
        if self.model is not None:
            count = lambda tree: int(sum(np.prod(x.shape) for x in jax.tree.leaves(tree)))   # noqa: E731
            variables = nnx.state(self.model, nnx.Any(nnx.Param, nnx.BatchStat))      # not its random streams
            return {"total": count(variables), "trainable": count(nnx.state(self.model, nnx.Param))}
        shapes = self.step.params if self.step is not None and self.step.params else []
        n = int(sum(np.prod(s) for s in shapes))
        return {"total": self.linen.count() if isinstance(self.linen, Found) else n, "trainable": n}

    def layers(self) -> list[str]:
        """The Flax module's leaf modules, by class, in order; a parameter pytree names no layers."""
        if self.model is None:
            return []
        return [type(m).__name__ for _, m in nnx.iter_modules(self.model)
                if not any(isinstance(child, nnx.Module) for _, child in nnx.iter_children(m))]


class _FirstGpuPeak:
    """XLA's allocator peak on the first GPU (reprokit/kits/jax_kit/memory.py), once the script has started JAX's
    backend (making it earlier would start XLA before the script's own settings)."""

    def __init__(self) -> None:
        self.inner: memory.DevicePeak | None = None

    def _peak(self) -> memory.DevicePeak | None:
        from jax._src import xla_bridge
        if self.inner is None and xla_bridge.backends_are_initialized():
            gpus = [d for d in jax.devices() if d.platform == "gpu"]
            self.inner = memory.DevicePeak(gpus[0]) if gpus else None
        return self.inner

    def reset(self, phase: str) -> None:
        if (peak := self._peak()) is not None:
            peak.reset(phase)

    def read(self) -> dict:
        if (peak := self._peak()) is None:
            return {"allocated": {"peak_bytes": None, "source": "JAX had not started its GPU backend"}}
        return peak.read()


Probe = JaxProbe      # what reprokit/kits/probe.py looks up in every framework's kit

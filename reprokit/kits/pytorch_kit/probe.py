"""PyTorch's side of the probe: the framework's own hooks, installed before the script's first line.

Observation hooks (they change nothing the script computes):
- the global optimizer step hooks (torch.optim.optimizer.register_optimizer_step_pre_hook / _post_hook):
  every training step, whatever optimizer and loop;
- until the first step, global module forward hooks find the model the optimizer trains (the outermost
  module whose parameters it steps); from then on one forward pre-hook on that model gives each
  pass's batch size (from the tensors), grad mode and module mode;
- torch.nn.functional.cross_entropy and nll_loss (what nn.CrossEntropyLoss and nn.NLLLoss call): the
  probe's own count of the loss and the correct predictions, kept on the device, and once the rows the
  loss received (logits or probabilities);
- Tensor.item, .cpu, .numpy, .tolist, bool() and float(): counted where the script's own files call
  them (a host synchronisation on a GPU);
- DataLoader.__iter__: each pass (its batch size and workers, whether gradients are off), and the bounds (a
  pass they end draws the rest of its sampler's indices, no samples, so a seeded sampler's next order is the
  unbounded run's);
- once training is over, a new instance of the trained model's class with its parameters (a reloaded
  checkpoint) gets the model's hooks; an evaluation pass's outputs are counted against its batch's labels
  where the script computes no loss (reprokit/kits/pytorch_kit/evaluation.py);
- torch.compile: whether the script compiled.
The device is synchronised at each timing window's edges and at each phase's, as in a kit run.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from reprokit.kits import served_data
from reprokit.kits.contract import settings as settings_lib
from reprokit.kits.contract import work_folder
from reprokit.kits.framework_free import model_call
from reprokit.kits.framework_free.measure import now
from reprokit.kits.measurement.hook_clock import HookClock, own_time
from reprokit.kits.observation.observe import Observer
from reprokit.kits.pytorch_kit import first_call, lightning_hooks, loader_bounds
from reprokit.kits.pytorch_kit.evaluation import OutputCount, watch_twins
from reprokit.kits.pytorch_kit.rank_evidence import RankEvidence
from reprokit.kits.pytorch_kit.read_settings import framework_settings, model_settings
from reprokit.kits.training_loop.staged_data import StagedData

SYNC_METHODS = ("item", "cpu", "numpy", "tolist", "__bool__", "__float__")


class TorchProbe:
    HOOKS = ("torch.optim's global optimizer step pre- and post-hooks: every training step",
             "global module forward hooks until the first step, then one forward pre-hook on the model the "
             "optimizer trains: each pass's batch size, grad mode and module mode",
             "torch.nn.functional.cross_entropy and nll_loss: the probe's own count of loss and correct predictions",
             "Tensor.item, .cpu, .numpy, .tolist, bool() and float() called from the script's own files: counted",
             "DataLoader.__iter__: each pass, its batch size, workers, prefetch and pinned memory",
             "once training is over, a new instance of the trained model's class with its parameters (a reloaded "
             "checkpoint): the model's hooks; an evaluation's outputs counted against its batch's labels where the "
             "script computes no loss",
             "torch.compile: whether the script compiled",
             "the device synchronised at each timing window's and phase's edges")

    def __init__(self, script_dir: Path) -> None:
        self.script_dir = str(script_dir)
        self.own_files = work_folder.own_files(script_dir)      # the script's own code (a notebook's cells too)
        self.observer: Observer | None = None
        self.model: torch.nn.Module | None = None
        self.models: list[str] = []            # every root module an optimizer stepped, by class
        self.compiled = False
        # outermost forward passes before the first step: (module, args, kwargs, output)
        self._roots: list[tuple[torch.nn.Module, tuple, dict, Any]] = []
        self._depth = 0
        self._handles: list = []
        self._global: list = []
        self.device = None
        self.optimizer = None                  # the first optimizer that stepped, and what the model received
        self.first_batch: torch.Tensor | None = None
        self.call: model_call.ModelCall | str | None = None   # the model's call at the first step, or why not
        self.others: list[str] = []            # models outside the trained one that an optimizer steps
        self.certifying = False                # the certificate's own passes: not the script's
        self.step_settings: dict | None = None  # what a training pass of the model ran as, read inside it
        self.count_outputs = OutputCount()     # takes the loss functions before the probe wraps them
        self.notes: list[str] = []             # what the run changed where the script made it (a Lightning Trainer)
        self.group: dict | None = None         # its process group at the first step (torch.distributed), if any
        self.evidence = RankEvidence()         # its samples and its waits, for the pitfalls of many devices

    # -- what the run uses -----------------------------------------------------------------------------

    def sync(self) -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def memory_now(self) -> int:
        from reprokit.kits.framework_free.measure import rss_bytes
        return torch.cuda.memory_allocated() if self._on_gpu() else rss_bytes()

    def _on_gpu(self) -> bool:
        return self.model is not None and next(self.model.parameters()).is_cuda

    def on_gpu(self) -> bool:
        return self._on_gpu()

    def device_ids(self) -> tuple[str | None, str | None]:
        """(CUDA's UUID of the trained model's device, its PCI bus id) for the NVML sampler."""
        if not self._on_gpu():
            return None, None
        return str(torch.cuda.get_device_properties(next(self.model.parameters()).device).uuid), None

    def gpu_counters(self) -> list:
        return [_AllocatorPeaks()]

    def memory_series(self) -> str:
        return "torch.cuda.memory_allocated" if self._on_gpu() else "process resident memory (VmRSS)"

    def sync_meaning(self) -> str:
        return ("each waits for the GPU's queued work" if self._on_gpu() else
                "on a CPU nothing waits; on a GPU each would wait for the queued work")

    def stage_data(self, named: StagedData, tfds_root: Path | None) -> list[str]:
        """The named datasets served by each library the script imports, and by URL (reprokit/kits/served_data/)."""
        return served_data.install(named, tfds_root)

    def as_float(self, value) -> float:
        return float(value) if not isinstance(value, torch.Tensor) else float(value.detach().cpu())

    # -- installing ------------------------------------------------------------------------------------

    def install(self, observer: Observer) -> None:
        self.observer = observer
        import torch.nn.modules.module as mod
        import torch.optim.optimizer as opt
        self._handles += [opt.register_optimizer_step_pre_hook(self._pre_step),
                          opt.register_optimizer_step_post_hook(self._post_step)]
        self._global = [mod.register_module_forward_pre_hook(self._any_pre),
                        mod.register_module_forward_hook(self._any_post, with_kwargs=True)]
        self._loss = first_call.LossSeen()
        self._wrap_losses()
        self._count_syncs()
        loader_bounds.install(self)
        lightning_hooks.install(self)
        real_compile = torch.compile

        def compile_(*args, **kwargs):
            self.compiled = True
            return real_compile(*args, **kwargs)
        torch.compile = compile_

    def _any_pre(self, module, args) -> None:
        self._depth += 1

    def _any_post(self, module, args, kwargs, output) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._roots.append((module, args, kwargs, output))
            del self._roots[:-8]               # the last few outermost passes: the model's is among them

    @own_time
    def _pre_step(self, optimizer, args, kwargs) -> None:
        if self.model is None:
            self._find_model(optimizer)
        self.evidence.step_begins(self.observer.t_measured is not None)
        self.observer.step_begins()

    @own_time
    def _post_step(self, optimizer, args, kwargs) -> None:
        self.observer.step_ends()

    def _find_model(self, optimizer) -> None:
        """The outermost module whose parameters this optimizer steps, from the passes seen since the start;
        any other such module (a second model) is named in ``others``."""
        stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
        trained = [root for root in reversed(self._roots) if any(id(p) in stepped for p in root[0].parameters())]
        if not trained:
            return
        self.model, args, kwargs, output = trained[0]
        self.optimizer = optimizer
        try:
            self.call = first_call.record(self.model, args, kwargs, output, self._loss.last)
            self.first_batch = first_call.batch_of(self.call)
        except model_call.Unreplayable as exc:
            self.call = str(exc)
            self.first_batch = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        self.group = _process_group()
        self.evidence.loss_scale(self._loss, getattr(self, "_own_mean", None), self.group, self.model)
        self._loss.stop()
        mine = {id(p) for p in self.model.parameters()}
        self.others = list(dict.fromkeys(_named(m) for m, *_ in trained if m is not self.model
                                         and any(id(p) not in mine for p in m.parameters())))
        if stepped - mine and not self.others:
            self.others.append("parameters outside any module it ran")
        for handle in self._global:
            handle.remove()
        self.models += [_named(self.model), *self.others]
        self._hook(self.model)
        watch_twins(self.model, self.observer.training_idle, self._hook)
        self._model_pre(self.model, args, kwargs, at_step=True)
        self._roots.clear()

    def _hook(self, module: torch.nn.Module) -> None:
        self._handles += [module.register_forward_pre_hook(self._model_pre, with_kwargs=True),
                          module.register_forward_hook(self._model_post)]

    @own_time
    def _model_pre(self, module, args, kwargs, at_step: bool = False) -> None:
        if self.certifying:
            return
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)] if kwargs else \
            [a for a in args if isinstance(a, torch.Tensor)]
        batch = next((a.shape[0] for a in tensors if a.dim()), 0)
        if torch.is_grad_enabled() and module.training:
            self.evidence.batch(self.observer.epoch, tensors[0] if tensors else None, self.observer.labels())
        if self.step_settings is None and not at_step and torch.is_grad_enabled() and module.training:
            # inside the script's own forward call: its autocast, its batch's memory format
            first = tensors[0] if tensors else None
            self.step_settings = model_settings(module, first, next(module.parameters()).device.type)
        self.observer.forward(int(batch), torch.is_grad_enabled(), module.training)

    @own_time
    def _model_post(self, module, args, output) -> None:
        """An evaluation's pass (gradients off, or the module in eval mode): the probe's own count of its outputs,
        used where the script computes no loss of them."""
        if self.certifying:
            return
        if torch.is_grad_enabled() and module.training:
            self.evidence.forward_ended()
            return
        seen = self.observer.seen["loss_input_probe"]
        counts = self.count_outputs(output, self.observer.labels(), seen["expects_logits"] if seen else None)
        if counts is not None:
            self.observer.outputs_counted(*counts)

    # -- the loss, the syncs, the loaders --------------------------------------------------------------

    def _wrap_losses(self) -> None:
        for name in ("cross_entropy", "nll_loss"):
            real = getattr(F, name)

            def counted(input, target, *args, _real=real, _name=name, **kwargs):
                out = _real(input, target, *args, **kwargs)
                if input.dim() == 2 and target.dim() == 1 and out.dim() == 0:
                    self._count(input, target, out, _name, kwargs.get("reduction", "mean"))
                return out
            setattr(F, name, counted)

    @own_time
    def _count(self, input, target, out, name: str, reduction: str) -> None:
        with torch.no_grad():
            n = target.shape[0]
            if self.observer.seen["loss_input_probe"] is None:
                self.observer.seen["loss_input_probe"] = {
                    "expects_logits": name == "cross_entropy", "rows": int(n),
                    "nonnegative": bool((input >= 0).all()),
                    "max_row_sum_error": float((input.float().sum(1) - 1).abs().max())}
            summed = out.detach().float() * (n if reduction == "mean" else 1)
            self.observer.loss(summed, (input.argmax(1) == target).sum())
            if self.model is None:           # until the first step: the mean loss its backward's loss scales
                self._own_mean = summed / n

    def _count_syncs(self) -> None:
        own_files = self.own_files
        for name in SYNC_METHODS:
            real = getattr(torch.Tensor, name)

            def counted(tensor, *args, _real=real, **kwargs):
                t0 = now()
                if sys._getframe(1).f_code.co_filename.startswith(own_files):
                    self.observer.host_sync()
                HookClock.seconds += now() - t0
                return _real(tensor, *args, **kwargs)
            setattr(torch.Tensor, name, counted)

    # -- the certificate -------------------------------------------------------------------------------

    def at_first_update(self, call) -> None:
        """``call()`` at the first optimizer step, before it changes the weights (the pre-step hook)."""
        self.observer.at_first_step.append(call)

    def captured(self, _other_input=None):
        """The trained model in the certificate's canonical form, as the probe captured it (PyTorch's side
        runs first: its own batch is the certificate's input)."""
        from reprokit.kits.pytorch_kit.canonical import Captured
        if not isinstance(self.call, model_call.ModelCall):
            raise model_call.Unreplayable(self.call or "the script's model call was not seen before its first step")
        seen = self.observer.seen["loss_input_probe"]
        # DDP's own forward synchronises with the other ranks: the certificate runs the model it wraps, alone
        model = self.model.module if isinstance(self.model, torch.nn.parallel.DistributedDataParallel) else self.model
        return Captured(model, self.optimizer, self.call, seen["expects_logits"] if seen else None,
                        f"the PyTorch script's {type(model).__name__}")

    def batchnorm_sync(self) -> str | None:
        """Whether its BatchNorm layers synchronise their statistics across the ranks (SyncBatchNorm); None
        without BatchNorm."""
        norms = [m for m in self.model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        if not norms:
            return None
        synced = sum(isinstance(m, torch.nn.SyncBatchNorm) for m in norms)
        return "synchronized" if synced == len(norms) else "per device" if not synced else "mixed"

    # -- what it saw -------------------------------------------------------------------------------------

    def environment(self) -> dict:
        import platform

        import numpy as np

        from reprokit.kits.framework_free.environment import cpu_name, nvidia_smi
        cuda = self._on_gpu()
        device = next(self.model.parameters()).device if self.model is not None else torch.device("cpu")
        return {
            "framework": "pytorch", "framework_version": torch.__version__,
            "build": {"cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if cuda else None},
            "python": platform.python_version(), "numpy": np.__version__,
            "device": "gpu" if cuda else "cpu",
            "device_name": torch.cuda.get_device_name(device) if cuda else cpu_name(),
            "device_uuid": str(torch.cuda.get_device_properties(device).uuid) if cuda else None,
            "gpus": nvidia_smi() if cuda else [], "gpu_count": torch.cuda.device_count() if cuda else 0,
            "cpu_threads": {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()},
            "settings": (settings := self.settings()),
            "data_layout": settings.get("data_layout", {}).get("value"),
            "execution": settings.get("execution", {}).get("value"),
            "tf32": torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32,
            "tf32_ops": {"matmul": torch.backends.cuda.matmul.allow_tf32,
                         "convolution": torch.backends.cudnn.allow_tf32},
            "cudnn_autotune": torch.backends.cudnn.benchmark,
            "precision": {"requested": "as the script ran it", "compute_dtype": _dtype(self.model),
                          "how": "the trained model's parameters"},
        }

    def settings(self) -> dict:
        """environment.settings as the script left torch at its end, its model as a training pass ran it, and
        the loader its training steps took their batches from."""
        out = framework_settings()
        if self.model is not None:
            out.update(self.step_settings or model_settings(self.model, self.first_batch,
                                                            next(self.model.parameters()).device.type))
        if self.compiled:
            out["execution"] = settings_lib.read("torch.compile", "the script called torch.compile")
        loader = self.observer.training_pass() if self.observer else None
        out.update(loader.settings if loader and loader.settings else loader_bounds.no_loader(
            "the script's own loop (no DataLoader): each batch is made in the loop" if loader is None else
            "its training loader is not a DataLoader"))
        return out

    def eager_loop(self) -> bool:
        """Eager is PyTorch's own way: only TensorFlow's eager custom loop is a finding."""
        return False

    def input_reader(self) -> str | None:
        """Its DataLoader passes say how it read its batches."""
        return None

    def finish(self) -> None:
        """Nothing is left to read: each hook reported as it ran."""

    def layers(self) -> list[str]:
        """The trained model's layers as the script built them: each leaf module's class, in order."""
        if self.model is None:
            return []
        return [type(m).__name__ for m in self.model.modules() if not list(m.children())]

    def parameters(self) -> dict:
        """As a kit run counts them: BatchNorm's running statistics in the total, as Keras counts them."""
        from reprokit.kits.pytorch_kit.canonical import parameter_counts
        return parameter_counts(self.model) if self.model is not None else {"total": 0, "trainable": 0}


def _process_group() -> dict | None:
    """This process's rank in torch.distributed's default group, the group's size and its collectives' backend,
    read at the first step (a script destroys its group before it ends); None outside a group."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return {"rank": dist.get_rank(), "ranks": dist.get_world_size(), "backend": str(dist.get_backend())}


def _named(module: torch.nn.Module) -> str:
    from reprokit.kits.pytorch_kit.canonical import parameter_counts
    return f"{type(module).__name__} with {parameter_counts(module)['total']:,} parameters"


def _dtype(model) -> str:
    if model is None:
        return "float32"
    return str(next(model.parameters()).dtype).split(".")[-1]


class _AllocatorPeaks:
    """The caching allocator's peaks of a phase, once the script has made its CUDA context (resetting them
    before would make it: the probe does not)."""

    def reset(self, _phase: str) -> None:
        if torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats()

    def read(self) -> dict:
        why = "reset at the phase's start, read at its end"
        if not torch.cuda.is_initialized():
            return {"allocated": {"peak_bytes": None, "source": "no CUDA context yet"}}
        return {"allocated": {"peak_bytes": torch.cuda.max_memory_allocated(),
                              "source": f"torch.cuda.max_memory_allocated, {why}"},
                "reserved": {"peak_bytes": torch.cuda.max_memory_reserved(),
                             "source": f"torch.cuda.max_memory_reserved, {why}"}}


Probe = TorchProbe      # what reprokit/kits/probe.py looks up in every framework's kit

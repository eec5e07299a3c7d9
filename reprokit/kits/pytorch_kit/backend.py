"""PyTorch behind the shared Backend interface."""
from __future__ import annotations

import platform

import numpy as np
import torch
import torch.nn.functional as F

from reprokit.kits.contract import settings as settings_lib
from reprokit.kits.contract.pitfalls import Pitfall
from reprokit.kits.contract.spec import FRAMEWORK_DEFAULT, RunSpec
from reprokit.kits.framework_free import cpu_peak, custom
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.framework_free.environment import cpu_name, nvidia_smi
from reprokit.kits.framework_free.measure import WindowTimer, rss_bytes
from reprokit.kits.measurement.backward_spans import BackwardSpans
from reprokit.kits.pytorch_kit import ddp, models, posted_input, trace
from reprokit.kits.pytorch_kit.canonical import parameter_counts
from reprokit.kits.pytorch_kit.read_settings import framework_settings, model_settings
from reprokit.kits.training_loop.feeding import FeederMixin, HookFeeder, NumpyFeeder


class Backend(FeederMixin):
    name = "pytorch"

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.pitfalls = spec.pitfalls
        numerics = spec.numerics
        threads = numerics.cpu_threads
        torch.set_num_threads(threads.intra())
        # settable once per process; FRAMEWORK_DEFAULT keeps torch's own pool (one thread per core)
        if threads.inter_op != FRAMEWORK_DEFAULT and torch.get_num_interop_threads() != threads.inter_op:
            torch.set_num_interop_threads(int(threads.inter_op))
        torch.manual_seed(spec.train.seed)
        # At N devices this process is one of torchrun's ranks, on its own device (reprokit/kits/pytorch_kit/ddp.py).
        self.ranks = ddp.Ranks(spec) if spec.devices > 1 else None
        self.device = self.ranks.device if self.ranks else torch.device(
            "cuda" if spec.device == "gpu" and torch.cuda.is_available() else "cpu")
        # FRAMEWORK_DEFAULT leaves torch's own (since 1.12: matmul TF32 off, cuDNN TF32 on, no autotuning).
        if numerics.tf32 != FRAMEWORK_DEFAULT:
            torch.backends.cuda.matmul.allow_tf32 = numerics.tf32
            torch.backends.cudnn.allow_tf32 = numerics.tf32
        if numerics.cudnn_autotune != FRAMEWORK_DEFAULT:
            torch.backends.cudnn.benchmark = numerics.cudnn_autotune
        data = spec.data
        self.resize = data.input_size if data.resize == "bilinear" else None
        self.scale = 1.0 / 255.0 if data.scale == "unit" else 1.0
        # mixed precision: autocast's compute dtype; fp16 also scales the loss (torch.amp.GradScaler)
        self.mixed = {"bf16_mixed": torch.bfloat16, "fp16_mixed": torch.float16}.get(numerics.precision)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.mixed is torch.float16)
        self.memory_format = torch.channels_last if numerics.channels_last else torch.contiguous_format
        self._loss_sum = torch.zeros((), device=self.device)
        self._correct = torch.zeros((), device=self.device, dtype=torch.int64)
        self.scheduler = None
        # The user's own code where the spec names it; else the posts' code where a pitfall reproduces it.
        self.input_hook = custom.hook(spec, "input", "pytorch")
        self.evaluate_hook = custom.hook(spec, "evaluate", "pytorch")
        self.metrics_hook = custom.hook(spec, "metrics", "pytorch")
        self._posted = [p for p in (Pitfall.PT_ITEM_PER_STEP, Pitfall.PT_METRICS_PER_BATCH,
                                    Pitfall.PT_RUNNING_ACC_TENSOR) if self.pitfalls.has(p)]
        if self.metrics_hook:
            self.metrics_source = f"the user's metrics hook {self.metrics_hook.ref}"
        elif self._posted:
            self.metrics_source = f"the posted bookkeeping ({', '.join(self._posted)})"
        else:
            self.metrics_source = "the kit's own count, per sample"
        self._metrics = None
        self._kept: dict = {}            # what the posted loop keeps alive between steps (pt_outputs_kept_alive)
        self._training: bool | None = None
        self.spans = BackwardSpans()     # at every count: its spans at N less those at one are the collectives' share
        self._trained = 0
        self.memory_series = ("torch.cuda.memory_allocated" if self.device.type == "cuda"
                              else "process resident memory (VmRSS)")
        self._seen = {"train_forwards": 0, "eval_forwards": 0, "eval_mode_in_train": 0, "grad_enabled_in_eval": 0,
                      "loss_input_probe": None}
        # environment.settings: read now; the loader's at build, and what the model runs as at its first step
        self.settings = framework_settings()

    def environment(self) -> dict:
        cuda = self.device.type == "cuda"
        return {
            "framework": "pytorch",
            "framework_version": torch.__version__,
            "build": {"cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if cuda else None},
            "python": platform.python_version(),
            "numpy": np.__version__,
            "device": "gpu" if cuda else "cpu",
            "device_name": torch.cuda.get_device_name(0) if cuda else cpu_name(),
            # CUDA's UUID of the device this process uses: the NVML sampler watches exactly this one
            "device_uuid": str(torch.cuda.get_device_properties(self.device).uuid) if cuda else None,
            "gpus": nvidia_smi() if cuda else [],
            "gpu_count": torch.cuda.device_count() if cuda else 0,
            "cpu_threads": {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()},
            "settings": self.settings,
            "tf32": torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32,
            # read back apart: torch has one switch for matmuls and one for cuDNN's convolutions
            "tf32_ops": {"matmul": torch.backends.cuda.matmul.allow_tf32,
                         "convolution": torch.backends.cudnn.allow_tf32},
            "cudnn_autotune": torch.backends.cudnn.benchmark,
            "precision": {"requested": self.spec.numerics.precision,
                          "compute_dtype": str(self.mixed or torch.float32).split(".")[-1],
                          "how": ("float32 throughout" if self.mixed is None else "torch.autocast" if
                                  self.mixed is torch.bfloat16 else "torch.autocast with torch.amp.GradScaler")},
        }

    def build(self, arrays: datalib.Arrays) -> dict:
        cfg, train = self.spec.model, self.spec.train
        self.model = models.build(cfg, self.spec.data.input_size, self.pitfalls).to(self.device,
                                                                                    memory_format=self.memory_format)
        # Every forward pass of the model, the user's own evaluation included, shows its grad and module mode.
        self.model.register_forward_pre_hook(self._observe_forward)
        self.eager = self.model           # what the FLOP count traces; the compiled module wraps it and its parameters
        if self.ranks:
            self.model = self.ranks.wrap(self.model)
        if self.spec.numerics.compile:
            # compiled at the first step of each shape, in the warmup (reprokit/kits/training_loop/training.py warms
            # every shape)
            self.model = torch.compile(self.model)
        opt = train.optimizer
        if opt.name == "adam":
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=opt.lr,
                                              betas=(opt.beta1, opt.beta2), eps=opt.epsilon)
        else:
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=opt.lr,
                                             momentum=opt.momentum, nesterov=opt.nesterov)
        if self.pitfalls.has(Pitfall.PT_PLATEAU_ON_SUM):
            # As posted, less verbose=True, which torch 2.14 no longer accepts (a declared adaptation).
            self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                self.optimizer, "min", patience=3, factor=0.9817)
        if self.pitfalls.has(Pitfall.PT_EVAL_ONCE):
            self.model.eval()        # CNN.eval() before trainNet; nothing switches it back
        if self.ranks:
            ddp.refused(self.spec, ([f"the user's input hook {self.input_hook.ref}"] if self.input_hook else []) +
                        ["the posted DataLoader"] * self.pitfalls.has(Pitfall.PT_CPU_RESIZE_DATALOADER))
        if self.input_hook:
            self.feeder = HookFeeder(self.input_hook, arrays, self.spec, self._to_device)
            self.input_reader = f"the user's input hook {self.input_hook.ref}"
        elif self.pitfalls.has(Pitfall.PT_CPU_RESIZE_DATALOADER):
            self.feeder = posted_input.CpuResizeLoader(arrays, self.spec, self._to_device)
            self.input_reader = posted_input.reader(self.spec)
        else:
            self.feeder = NumpyFeeder(arrays, self.spec, self._to_device,
                                      share=self.ranks.share if self.ranks else None)
            self.input_reader = NumpyFeeder.READER
        self.settings.update(self._loader_settings())
        return {"parameters": parameter_counts(self.model)}

    def _loader_settings(self) -> dict:
        """How the kit's feeder hands batches over: in the training loop, nothing prefetched; its copies to a GPU
        leave from pinned memory unless the posted blocking copy is reproduced."""
        if self.input_hook:
            why = f"the user's input hook {self.input_hook.ref} yields the batches: its loader is not seen"
            return dict.fromkeys(("loader.workers", "loader.prefetch", "loader.pin_memory"),
                                 settings_lib.not_reported(why))
        posted = self.pitfalls.has(Pitfall.PT_CPU_RESIZE_DATALOADER)
        where = ("the posted DataLoader(num_workers=0)" if posted
                 else "the kit's feeder slices each batch in the training loop")
        pinned = self.device.type == "cuda" and not self.pitfalls.has(Pitfall.PT_BLOCKING_COPY)
        return {"loader.workers": settings_lib.read(0, where),
                "loader.prefetch": settings_lib.read(0, f"{where}: nothing is prepared ahead"),
                "loader.pin_memory": settings_lib.read(pinned, "Tensor.pin_memory() before each non-blocking copy"
                                                       if pinned else "copies leave from pageable memory")}

    def training_flops(self) -> dict:
        """Training FLOPs per sample of the model built, counted once before training (the memory phases
        start after it, so its tensors are in no phase's peak)."""
        return trace.training_flops(self.eager, self.spec.data.input_size, self.device)

    def _to_device(self, x, y):
        x = torch.from_numpy(x) if isinstance(x, np.ndarray) else x
        y = torch.from_numpy(y) if isinstance(y, np.ndarray) else y
        # As posted, inputs.to(device): each copy waits. The kit's own copies do not: a copy from pageable
        # memory would make the host wait for every kernel already queued, so they leave from pinned memory
        # (the caching host allocator keeps each block until its copy is done), as DataLoader(pin_memory=True).
        non_blocking = not self.pitfalls.has(Pitfall.PT_BLOCKING_COPY)
        if non_blocking and self.device.type == "cuda":
            # a user's input hook may hand over tensors already on the GPU: only host tensors are pinned
            x, y = (t.pin_memory() if t.device.type == "cpu" else t for t in (x, y))
        return x.to(self.device, non_blocking=non_blocking), y.to(self.device, non_blocking=non_blocking)

    def _inputs(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.uint8:
            return x          # already scaled and resized on the CPU by the as-posted loader
        # uint8 NHWC -> float NCHW (in memory NHWC with channels_last), scaled, resized on the device
        x = x.permute(0, 3, 1, 2).float().mul_(self.scale).contiguous(memory_format=self.memory_format)
        if self.resize:
            x = F.interpolate(x, size=(self.resize, self.resize), mode="bilinear",
                              align_corners=False, antialias=False)
        return x

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.mixed or torch.bfloat16, enabled=self.mixed is not None)

    def _loss(self, outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # In fp32 whatever the compute precision, as the TensorFlow kit casts its logits first.
        return F.cross_entropy(outputs.float(), y)

    def _observe_forward(self, module: torch.nn.Module, _args) -> None:
        if self._training is True:
            self._seen["train_forwards"] += 1
            self._seen["eval_mode_in_train"] += not module.training
        elif self._training is False:
            self._seen["eval_forwards"] += 1
            self._seen["grad_enabled_in_eval"] += torch.is_grad_enabled()

    def train_step(self, batch) -> None:
        x, y = batch
        # Free the last step's gradients before the forward pass, as Keras keeps none between steps.
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast():
            inputs = self._inputs(x)
            if "execution" not in self.settings:       # once: what the first step ran with (a builder may switch)
                self.settings.update(framework_settings(), **model_settings(self.model, inputs, self.device.type))
            outputs = self.model(inputs)
        loss = self._loss(outputs, y)
        if self._seen["loss_input_probe"] is None:      # once, in the warmup: it reads values back
            self._seen.update(loss_input_probe=_probe(outputs.detach()), loss_dtype=str(loss.dtype).split(".")[-1])
            if self.ranks:
                self.ranks.first_step(x, outputs, y, loss)
        self.spans.forward_ended()
        self.scaler.scale(loss).backward()          # scaled in fp16 only: otherwise backward() and step()
        self._trained += 1
        self.spans.step_begins(self._trained > self.spec.train.warmup_steps)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self._count(outputs, y, loss)
        if self.pitfalls.has(Pitfall.PT_OUTPUTS_KEPT_ALIVE):
            self._kept["train"] = (outputs, loss)     # outputs = model(inputs): replaced by the next step's, not freed

    def eval_step(self, batch) -> None:
        x, y = batch
        inputs = self._inputs(x)
        with self._autocast():
            if self.evaluate_hook:
                outputs = self.evaluate_hook(self.model, inputs)
            elif self.pitfalls.has(Pitfall.PT_VAL_GRAD):
                outputs = self.model(inputs)          # as posted: no torch.no_grad(), a graph per batch
            else:
                with torch.no_grad():
                    outputs = self.model(inputs)
        loss = self._loss(outputs, y)                 # carries the graph wherever the outputs do
        self._count(outputs, y, loss)
        if self.pitfalls.has(Pitfall.PT_OUTPUTS_KEPT_ALIVE):
            # val_outputs, val_loss_size: alive through the next batch's forward pass, and the last ones
            # (graph included) through the next epoch's training
            self._kept["eval"] = (outputs, loss)

    def _count(self, outputs: torch.Tensor, y: torch.Tensor, loss: torch.Tensor) -> None:
        """The kit's own count from the outputs it saw, in on-device sums (no synchronisation); then the
        run's metrics, the user's hook or the posted bookkeeping, see the same outputs."""
        with torch.no_grad():
            self._correct += (outputs.argmax(1) == y).sum()
            self._loss_sum += loss.detach() * y.shape[0]
        if self._metrics is not None:
            self._metrics.update(outputs, y, loss)

    def forget_outputs(self) -> None:
        self._kept.clear()

    def set_mode(self, training: bool) -> None:
        self._training = training
        if not training and self.device.type == "cuda" and self.pitfalls.has(Pitfall.PT_EMPTY_CACHE_BEFORE_EVAL):
            torch.cuda.empty_cache()      # as posted, between the epoch's training and its validation
        if not self.pitfalls.has(Pitfall.PT_EVAL_ONCE):
            self.model.train(training)
        if self.metrics_hook:
            self._metrics = self.metrics_hook()
        elif self._posted:
            self._metrics = _PostedMetrics(self.pitfalls, self.device)

    def reported(self) -> dict | None:
        return self._metrics.result() if self._metrics is not None else None

    def end_epoch(self, train_loss_sum: float) -> None:
        if self.scheduler is not None:
            # total_train_loss in the post: the per-batch mean losses, summed
            self.scheduler.step(train_loss_sum / self.spec.train.batch_size)

    def take_sums(self) -> tuple[float, float]:
        loss, correct = float(self._loss_sum), float(self._correct)
        self._loss_sum.zero_()
        self._correct.zero_()
        return loss, correct

    def step_timer(self, k: int) -> WindowTimer:
        # Taken as the TensorFlow kit takes them: windows of k steps, the device synchronised at their edges.
        return WindowTimer(k, self.sync)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def memory_now(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated()
        return rss_bytes()

    def memory_counters(self) -> list:
        return [_AllocatorPeaks()] if self.device.type == "cuda" else []

    def matmul_flops_per_s(self, n: int = 1024) -> float:
        """The device's measured fp32 matmul rate with the run's thread settings: a peak to hold throughput against."""
        a = torch.randn(n, n, device=self.device)
        b = torch.randn(n, n, device=self.device)
        return cpu_peak.best_rate(lambda: a @ b, lambda c: c.sum().item(), 2.0 * n**3)

    def observed(self) -> dict:
        # the loss scale torch.amp.GradScaler holds at the end (None: it was not enabled)
        return {**self._seen, "loss_scale": self.scaler.get_scale() if self.scaler.is_enabled() else None,
                "backward_span_s": self.spans.spans}

    def at_n(self) -> dict | None:
        return self.ranks.at_n() if self.ranks else None

    def no_gpu_reason(self) -> str:
        try:
            torch.cuda.init()         # raises with CUDA's own reason: no driver, a driver too old, no device
        except Exception as exc:      # noqa: BLE001 - its words are the evidence
            return custom.one_line(exc)
        return f"torch.cuda.device_count() is {torch.cuda.device_count()}"


class _AllocatorPeaks:
    """The caching allocator's peaks of a phase: reset at its start, read at its end."""

    def reset(self, _phase: str) -> None:
        torch.cuda.reset_peak_memory_stats()

    def read(self) -> dict:
        why = "reset at the phase's start, read at its end"
        return {"allocated": {"peak_bytes": torch.cuda.max_memory_allocated(),
                              "source": f"torch.cuda.max_memory_allocated, {why}"},
                "reserved": {"peak_bytes": torch.cuda.max_memory_reserved(),
                             "source": f"torch.cuda.max_memory_reserved, {why}"}}


class _PostedMetrics:
    """The posts' own bookkeeping, behind the metrics hook's interface.

    Seed 000: ``running_loss += loss.item() * inputs.size(0)`` (pt_item_per_step: the host waits for the
    device every step) and ``running_corrects += torch.sum(preds == labels.data)``, both divided by
    ``len(dataloader)`` (pt_metrics_per_batch). Seed 004: ``total_train_acc += acc`` with ``acc`` from
    ``torch.max(outputs.data, 1)`` (pt_running_acc_tensor), its loss summed with ``.item()`` per step.
    Without pt_item_per_step the loss stays an on-device sum, as the kit's own.
    """

    def __init__(self, pitfalls, device: torch.device) -> None:
        self.item = pitfalls.has(Pitfall.PT_ITEM_PER_STEP)
        self.per_batch = pitfalls.has(Pitfall.PT_METRICS_PER_BATCH)
        self.data = pitfalls.has(Pitfall.PT_RUNNING_ACC_TENSOR)
        self.loss = 0.0 if self.item else torch.zeros((), device=device)
        self.correct = torch.zeros((), device=device, dtype=torch.int64)
        self.samples = self.batches = 0

    def update(self, outputs: torch.Tensor, labels: torch.Tensor, loss: torch.Tensor) -> None:
        n = labels.shape[0]
        if self.item:
            self.loss += loss.item() * n
        else:
            self.loss = self.loss + loss.detach() * n
        _, predictions = torch.max(outputs.data if self.data else outputs, 1)
        self.correct = self.correct + torch.sum(predictions == labels.data)
        self.samples, self.batches = self.samples + n, self.batches + 1

    def result(self) -> dict:
        divisor = self.batches if self.per_batch else self.samples
        return {"loss": float(self.loss) / divisor, "accuracy": float(self.correct) / divisor}


def _probe(outputs: torch.Tensor) -> dict:
    """Do the rows the loss receives look like probabilities? (cross_entropy expects logits)"""
    return {"expects_logits": True, "rows": int(outputs.shape[0]), "nonnegative": bool((outputs >= 0).all()),
            "max_row_sum_error": float((outputs.sum(1) - 1).abs().max())}

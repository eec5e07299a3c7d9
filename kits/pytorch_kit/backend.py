"""PyTorch behind the shared Backend interface."""
from __future__ import annotations

import platform
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from kits.common import data as datalib
from kits.common.environment import cpu_name, nvidia_smi
from kits.common.feeding import FeederMixin, NumpyFeeder
from kits.common.measure import WindowTimer, now, peak_rss_bytes, rss_bytes
from kits.common.pitfalls import Pitfall
from kits.common.spec import RunSpec
from kits.pytorch_kit import models, trace


class Backend(FeederMixin):
    name = "pytorch"

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.pitfalls = spec.pitfalls
        numerics = spec.numerics
        threads = numerics.cpu_threads
        torch.set_num_threads(threads.intra_op)
        if torch.get_num_interop_threads() != threads.inter_op:    # settable once per process
            torch.set_num_interop_threads(threads.inter_op)
        torch.manual_seed(spec.train.seed)
        self.device = torch.device("cuda" if spec.device == "gpu" and torch.cuda.is_available() else "cpu")
        torch.backends.cuda.matmul.allow_tf32 = numerics.tf32
        torch.backends.cudnn.allow_tf32 = numerics.tf32
        torch.backends.cudnn.benchmark = numerics.cudnn_autotune
        data = spec.data
        self.resize = data.input_size if data.resize == "bilinear" else None
        self.scale = 1.0 / 255.0 if data.scale == "unit" else 1.0
        self.averaged_over = "batches" if self.pitfalls.has(Pitfall.PT_METRICS_PER_BATCH) else "samples"
        self.bf16 = numerics.precision == "bf16_mixed"
        self._loss_sum = torch.zeros((), device=self.device)
        self._correct = torch.zeros((), device=self.device, dtype=torch.int64)
        self.scheduler = None
        self._seen = {"train_steps": 0, "eval_steps": 0, "eval_mode_in_train": 0, "grad_enabled_in_eval": 0,
                      "loss_input_probe": None}
        self._planted_total = 0.0

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
            "data_layout": "NCHW",
            "execution": "eager",
            "tf32": torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32,
            "cudnn_autotune": torch.backends.cudnn.benchmark,
            "precision": {"requested": self.spec.numerics.precision,
                          "compute_dtype": "bfloat16" if self.bf16 else "float32", "how": "torch.autocast"
                          if self.bf16 else "float32 throughout"},
        }

    def build(self, arrays: datalib.Arrays) -> dict:
        cfg, train = self.spec.model, self.spec.train
        self.model = models.build(cfg, self.spec.data.input_size, self.pitfalls).to(self.device)
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
        self.feeder = (_CpuResizeLoader(arrays, self.spec, self._to_device)
                       if self.pitfalls.has(Pitfall.PT_CPU_RESIZE_DATALOADER)
                       else NumpyFeeder(arrays, self.spec, self._to_device))
        if self.pitfalls.has(Pitfall.PT_SLOW_INPUT):
            self.feeder = _SlowSource(self.feeder)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        return {"parameters": models.parameter_counts(self.model)}

    def training_flops(self) -> dict:
        """Training FLOPs per sample of the model built, counted once before training; the device's
        memory peak is reset afterwards, so that it is training's alone."""
        flops = trace.training_flops(self.model, self.spec.data.input_size, self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        return flops

    def _to_device(self, x, y):
        x = torch.from_numpy(x) if isinstance(x, np.ndarray) else x
        y = torch.from_numpy(y) if isinstance(y, np.ndarray) else y
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            return self.model(self._inputs(x))

    def _inputs(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.uint8:
            return x          # already scaled and resized on the CPU by the as-posted loader
        # uint8 NHWC -> float NCHW, scaled, resized on the device
        x = x.permute(0, 3, 1, 2).float().mul_(self.scale).contiguous()
        if self.resize:
            x = F.interpolate(x, size=(self.resize, self.resize), mode="bilinear",
                              align_corners=False, antialias=False)
        return x

    def train_step(self, batch) -> None:
        x, y = batch
        self._seen["train_steps"] += 1
        self._seen["eval_mode_in_train"] += not self.model.training
        # Free the last step's gradients before the forward pass, as Keras keeps none between steps.
        self.optimizer.zero_grad(set_to_none=True)
        outputs = self._forward(x)
        if self._seen["loss_input_probe"] is None:      # once, in the warmup: it reads values back
            self._seen["loss_input_probe"] = _probe(outputs.detach())
        loss = F.cross_entropy(outputs, y)
        if self.pitfalls.has(Pitfall.PT_LOSS_SUM_TENSOR):
            self._planted_total = self._planted_total + loss
        loss.backward()
        self.optimizer.step()
        self._accumulate(outputs, y, loss)

    def eval_step(self, batch) -> None:
        x, y = batch
        self._seen["eval_steps"] += 1
        if self.pitfalls.has(Pitfall.PT_VAL_GRAD):
            self._seen["grad_enabled_in_eval"] += torch.is_grad_enabled()
            outputs = self._forward(x)       # no torch.no_grad(): a graph per batch
            self._accumulate(outputs, y, F.cross_entropy(outputs, y))
            return
        with torch.no_grad():
            self._seen["grad_enabled_in_eval"] += torch.is_grad_enabled()
            outputs = self._forward(x)
            self._accumulate(outputs, y, F.cross_entropy(outputs, y))

    def _accumulate(self, outputs: torch.Tensor, y: torch.Tensor, loss: torch.Tensor) -> None:
        # On-device sums: no .item() here, so the step adds no synchronisation.
        if self.pitfalls.has(Pitfall.PT_RUNNING_ACC_TENSOR):
            # As posted: torch.max(outputs.data, 1), then total_train_acc += acc (a tensor).
            _, predictions = torch.max(outputs.data, 1)
            self._correct = self._correct + (y == predictions).sum()
        else:
            with torch.no_grad():
                self._correct += (outputs.argmax(1) == y).sum()
        with torch.no_grad():
            self._loss_sum += loss.detach() * y.shape[0]

    def set_mode(self, training: bool) -> None:
        if not self.pitfalls.has(Pitfall.PT_EVAL_ONCE):
            self.model.train(training)

    def end_epoch(self, train_loss_sum: float) -> None:
        if self.scheduler is not None:
            # total_train_loss in the post: the per-batch mean losses, summed
            self.scheduler.step(train_loss_sum / self.spec.train.batch_size)

    def take_sums(self) -> tuple[float, float]:
        loss, correct = float(self._loss_sum), float(self._correct)
        self._loss_sum.zero_()
        self._correct = torch.zeros_like(self._correct)
        return loss, correct

    def step_timer(self, k: int):
        return _CudaEventTimer() if self.device.type == "cuda" else WindowTimer(k, self.sync)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def memory_now(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated()
        return rss_bytes()

    def matmul_flops_per_s(self, n: int = 1024, seconds: float = 0.3) -> float:
        """The device's measured fp32 matmul rate with the run's thread settings: a peak to hold throughput against."""
        a = torch.randn(n, n, device=self.device)
        b = torch.randn(n, n, device=self.device)
        (a @ b).sum().item()
        count, t0 = 0, now()
        while now() - t0 < seconds:
            c = a @ b
            count += 1
        c.sum().item()
        return 2 * n**3 * count / (now() - t0)

    def observed(self) -> dict:
        return dict(self._seen)

    def memory_report(self) -> dict:
        if self.device.type == "cuda":
            return {"peak_bytes": torch.cuda.max_memory_allocated(), "source": "torch.cuda.max_memory_allocated",
                    "framework": {"peak_allocated": torch.cuda.max_memory_allocated(),
                                  "peak_reserved": torch.cuda.max_memory_reserved()}}
        return {"peak_bytes": peak_rss_bytes(), "source": "process peak resident memory (getrusage)",
                "framework": {}}


class _CudaEventTimer:
    """Per-step device time from CUDA events recorded between steps; read once, at the end,
    so the timed loop adds no host-device synchronisation of its own."""

    method = "CUDA events recorded between consecutive steps (read after training)"

    def __init__(self) -> None:
        self._pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._last: torch.cuda.Event | None = None

    def _event(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def start(self) -> None:
        self._last = self._event()

    def tick(self) -> None:
        event = self._event()
        self._pairs.append((self._last, event))
        self._last = event

    def per_step(self) -> list[float]:
        torch.cuda.synchronize()
        return [a.elapsed_time(b) / 1e3 for a, b in self._pairs]


def _probe(outputs: torch.Tensor) -> dict:
    """Do the rows the loss receives look like probabilities? (cross_entropy expects logits)"""
    return {"expects_logits": True, "rows": int(outputs.shape[0]), "nonnegative": bool((outputs >= 0).all()),
            "max_row_sum_error": float((outputs.sum(1) - 1).abs().max())}


class _SlowSource:
    """Planted for the input-bound detector's test: every batch arrives 50 ms late."""

    def __init__(self, feeder) -> None:
        self.feeder = feeder

    def _slow(self, batches):
        for batch in batches:
            time.sleep(0.05)
            yield batch

    def train(self, epoch: int):
        return self._slow(self.feeder.train(epoch))

    def test(self):
        return self.feeder.test()


class _ResizedImages(Dataset):
    def __init__(self, x: np.ndarray, y: np.ndarray, transform) -> None:
        self.x, self.y, self.transform = x, y, transform

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        from PIL import (
            Image,  # only this pitfall needs PIL and torchvision: keep them off every other run
        )
        return self.transform(Image.fromarray(self.x[i])), int(self.y[i])


class _CpuResizeLoader:
    """The post's pipeline: transforms.Resize((S, S)) + ToTensor per PIL image, in a
    single-process DataLoader, in the same batch order as every other run."""

    def __init__(self, arrays: datalib.Arrays, spec: RunSpec, to_device) -> None:
        from torchvision import transforms
        size = spec.data.input_size
        self.transform = transforms.Compose([transforms.Resize((size, size)), transforms.ToTensor()])
        self.arrays, self.spec, self.to_device = arrays, spec, to_device

    def _load(self, x: np.ndarray, y: np.ndarray, batches):
        loader = DataLoader(_ResizedImages(x, y, self.transform), batch_sampler=list(batches), num_workers=0)
        return (self.to_device(xb, yb) for xb, yb in loader)

    def train(self, epoch: int):
        a, t = self.arrays, self.spec.train
        order = datalib.epoch_order(len(a.x_train), t.seed, epoch, self.spec.data.shuffle)
        return self._load(a.x_train, a.y_train, datalib.batches(order, t.batch_size, True))

    def test(self):
        a = self.arrays
        order = np.arange(len(a.x_test))
        return self._load(a.x_test, a.y_test, datalib.batches(order, self.spec.train.eval_batch_size, False))

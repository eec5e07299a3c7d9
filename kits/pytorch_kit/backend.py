"""PyTorch behind the shared Backend interface."""
from __future__ import annotations

import platform

import numpy as np
import torch
import torch.nn.functional as F

from kits.common.environment import cpu_name, nvidia_smi
from kits.common.measure import peak_rss_bytes, rss_bytes
from kits.pytorch_kit import models


class Backend:
    name = "pytorch"

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        numerics = spec["numerics"]
        threads = numerics["cpu_threads"]
        torch.set_num_threads(threads["intra_op"])
        torch.set_num_interop_threads(threads["inter_op"])
        torch.manual_seed(spec["train"]["seed"])
        self.device = torch.device("cuda" if spec["device"] == "gpu" and torch.cuda.is_available() else "cpu")
        torch.backends.cuda.matmul.allow_tf32 = numerics["tf32"]
        torch.backends.cudnn.allow_tf32 = numerics["tf32"]
        torch.backends.cudnn.benchmark = numerics["cudnn_autotune"]
        data = spec["data"]
        self.resize = data["input_size"] if data["resize"] == "bilinear" else None
        self.scale = 1.0 / 255.0 if data["scale"] == "unit" else 1.0
        self._loss_sum = torch.zeros((), device=self.device)
        self._correct = torch.zeros((), device=self.device, dtype=torch.int64)

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
            "gpus": nvidia_smi() if cuda else [],
            "gpu_count": torch.cuda.device_count() if cuda else 0,
            "cpu_threads": {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()},
            "data_layout": "NCHW",
            "execution": "eager",
            "tf32": torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32,
            "cudnn_autotune": torch.backends.cudnn.benchmark,
        }

    def build(self) -> dict:
        cfg, train = self.spec["model"], self.spec["train"]
        self.model = models.build(cfg, self.spec["data"]["input_size"]).to(self.device)
        opt = train["optimizer"]
        if opt["name"] == "adam":
            self.optimizer = torch.optim.Adam(self.model.parameters(), lr=opt["lr"],
                                              betas=(opt["beta1"], opt["beta2"]), eps=opt["epsilon"])
        else:
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=opt["lr"],
                                             momentum=opt["momentum"], nesterov=opt["nesterov"])
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        return {"parameters": models.parameter_counts(self.model)}

    def to_device(self, x: np.ndarray, y: np.ndarray):
        xt = torch.from_numpy(x).to(self.device, non_blocking=True)
        yt = torch.from_numpy(y).to(self.device, non_blocking=True)
        return xt, yt

    def batch_size_of(self, batch) -> int:
        return int(batch[0].shape[0])

    def _inputs(self, x: torch.Tensor) -> torch.Tensor:
        # uint8 NHWC -> float NCHW in [0,1], resized on the device
        x = x.permute(0, 3, 1, 2).float().mul_(self.scale).contiguous()
        if self.resize:
            x = F.interpolate(x, size=(self.resize, self.resize), mode="bilinear",
                              align_corners=False, antialias=False)
        return x

    def train_step(self, batch) -> None:
        x, y = batch
        logits = self.model(self._inputs(x))
        loss = F.cross_entropy(logits, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self._accumulate(logits, y, loss)

    def eval_step(self, batch) -> None:
        x, y = batch
        with torch.no_grad():
            logits = self.model(self._inputs(x))
            self._accumulate(logits, y, F.cross_entropy(logits, y))

    def _accumulate(self, logits: torch.Tensor, y: torch.Tensor, loss: torch.Tensor) -> None:
        # On-device sums: no .item() here, so the step adds no synchronisation.
        with torch.no_grad():
            self._loss_sum += loss.detach() * y.shape[0]
            self._correct += (logits.argmax(1) == y).sum()

    def set_mode(self, training: bool) -> None:
        self.model.train(training)

    def take_sums(self) -> tuple[float, float]:
        loss, correct = float(self._loss_sum), float(self._correct)
        self._loss_sum.zero_()
        self._correct.zero_()
        return loss, correct

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def memory_now(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated()
        return rss_bytes()

    def memory_report(self) -> dict:
        if self.device.type == "cuda":
            return {"peak_bytes": torch.cuda.max_memory_allocated(), "source": "torch.cuda.max_memory_allocated",
                    "framework": {"peak_allocated": torch.cuda.max_memory_allocated(),
                                  "peak_reserved": torch.cuda.max_memory_reserved()}}
        return {"peak_bytes": peak_rss_bytes(), "source": "process peak resident memory (getrusage)",
                "framework": {}}

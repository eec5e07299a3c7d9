"""The stub framework behind the shared Backend interface: a linear softmax classifier in numpy, SGD."""
from __future__ import annotations

import platform
from typing import Any

import numpy as np

from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free import arithmetic
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.framework_free.environment import cpu_name
from reprokit.kits.framework_free.measure import WindowTimer, now, rss_bytes
from reprokit.kits.training_loop.feeding import FeederMixin, NumpyFeeder


class Backend(FeederMixin):
    name = "stub"
    metrics_source = "the kit's own count, per sample"
    memory_series = "process resident memory (VmRSS)"

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.rng = np.random.default_rng(spec.train.seed)
        self.scale = np.float32(spec.data.unit_scale)
        self.lr = np.float32(spec.train.optimizer.lr)
        self._loss_sum, self._correct = 0.0, 0.0
        self._seen: dict[str, Any] = {"train_forwards": 0, "eval_forwards": 0, "eval_mode_in_train": 0,
                                      "grad_enabled_in_eval": 0, "loss_input_probe": None}
        self._training = True

    def environment(self) -> dict[str, Any]:
        return {"framework": "stub", "framework_version": np.__version__, "build": {"cuda": None, "cudnn": None},
                "python": platform.python_version(), "numpy": np.__version__, "device": "cpu",
                "device_name": cpu_name(), "device_uuid": None, "gpus": [], "gpu_count": 0,
                "cpu_threads": {"intra_op": 1, "inter_op": 1}, "data_layout": "NHWC", "execution": "eager",
                "tf32": False, "tf32_ops": {"matmul": False, "convolution": False}, "cudnn_autotune": False,
                "precision": {"requested": self.spec.numerics.precision, "compute_dtype": "float32",
                              "how": "float32 throughout"}}

    def build(self, arrays: datalib.Arrays) -> dict[str, Any]:
        features = int(np.prod(arrays.x_train.shape[1:]))
        classes = self.spec.model.num_classes
        self.w = (self.rng.standard_normal((features, classes)) * 0.01).astype(np.float32)
        self.b = np.zeros(classes, np.float32)
        self.feeder = NumpyFeeder(arrays, self.spec, lambda x, y: (x, y))
        self.input_reader = NumpyFeeder.READER
        return {"parameters": {"total": self.w.size + self.b.size, "trainable": self.w.size + self.b.size}}

    def training_flops(self) -> dict[str, Any]:
        ops = [{"op": "matmul", "macs": self.w.size, "grads": ["weight"]}]
        return {**arithmetic.flops(ops), "how": "the stub's one matrix product"}

    def _forward(self, x: np.ndarray) -> np.ndarray:
        logits: np.ndarray = (x.reshape(len(x), -1).astype(np.float32) * self.scale) @ self.w + self.b
        return logits

    def _count(self, logits: np.ndarray, y: np.ndarray) -> np.ndarray:
        shifted = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(shifted)
        p /= p.sum(axis=1, keepdims=True)
        self._loss_sum += float(-np.log(p[np.arange(len(y)), y] + 1e-12).sum())
        self._correct += float((logits.argmax(axis=1) == y).sum())
        if self._seen["loss_input_probe"] is None:
            self._seen["loss_input_probe"] = {"expects_logits": True, "rows": int(len(y)),
                                              "nonnegative": bool((logits >= 0).all()),
                                              "max_row_sum_error": float(np.abs(logits.sum(1) - 1).max())}
        return p

    def train_step(self, batch: Any) -> None:
        x, y = batch
        y = np.asarray(y, np.int64)
        self._seen["train_forwards"] += 1
        p = self._count(self._forward(x), y)
        p[np.arange(len(y)), y] -= 1.0
        flat = x.reshape(len(x), -1).astype(np.float32) * self.scale
        self.w -= self.lr * (flat.T @ p) / len(y)
        self.b -= self.lr * p.mean(axis=0)

    def eval_step(self, batch: Any) -> None:
        x, y = batch
        self._seen["eval_forwards"] += 1
        self._count(self._forward(x), np.asarray(y, np.int64))

    def set_mode(self, training: bool) -> None:
        self._training = training

    def reported(self) -> dict[str, Any] | None:
        return None

    def end_epoch(self, train_loss_sum: float) -> None:
        pass

    def take_sums(self) -> tuple[float, float]:
        out = self._loss_sum, self._correct
        self._loss_sum, self._correct = 0.0, 0.0
        return out

    def step_timer(self, k: int) -> WindowTimer:
        return WindowTimer(k, self.sync)

    def sync(self) -> None:
        pass

    def memory_now(self) -> int:
        return rss_bytes()

    def memory_counters(self) -> list[Any]:
        return []

    def matmul_flops_per_s(self, n: int = 256, seconds: float = 0.1) -> float:
        a = self.rng.standard_normal((n, n)).astype(np.float32)
        count, t0 = 0, now()
        while now() - t0 < seconds:
            a @ a
            count += 1
        return 2 * n**3 * count / (now() - t0)

    def observed(self) -> dict[str, Any]:
        return dict(self._seen)

    def no_gpu_reason(self) -> str:
        return "the stub computes with numpy on the CPU only"

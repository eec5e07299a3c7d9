"""The PyTorch half of the equivalence certificate: the kit's own model and step, in canonical form.

The model, optimizer, loss and input preprocessing are the Backend's, built from the spec exactly
as a training run builds them (reprokit/kits/pytorch_kit/canonical.py holds the canonical form and the passes).
The trace and the dropout passes see the model as it trains; every other pass runs with dropout
switched off by a dispatch mode (so functional dropout is switched off too), so that two frameworks'
random masks cannot differ.
"""
from __future__ import annotations

import math
import platform

import numpy as np
import torch
import torch.nn.functional as F

from reprokit.kits.framework_free import certificate as cert
from reprokit.kits.pytorch_kit.backend import Backend
from reprokit.kits.pytorch_kit.canonical import Canonical, NoDropout, read_optimizer


class Certifier(Canonical, cert.Side):
    framework = "pytorch"
    backend_class = Backend

    def _build(self) -> None:
        """Build the kit's model and optimizer (again); the first build is traced, later ones (the same
        builder, freshly initialised) reuse what the trace found, by module name and layer number."""
        self.backend.build(self.arrays)
        self._steps = 0                   # optimizer steps taken since the build (for the per-step settings)
        # the eager module (torch.compile's wrapper runs the same parameters through generated kernels): the
        # certificate traces and steps it op by op, as it does every run's model
        self.model = self.backend.eager
        self._canonical()

    def use_float64(self) -> None:
        """Build the same model and optimizer again, from the same builder, in float64.

        The default dtype stays float64 from here on: torch.optim creates its step counter
        (which Adam's bias corrections use) in the default dtype at the first step."""
        torch.set_default_dtype(torch.float64)
        self._build()
        if self.dtype != torch.float64:
            raise RuntimeError(f"the float64 rebuild of the PyTorch model has {self.dtype} weights")

    def _read_optimizer(self) -> dict:
        return read_optimizer(self.backend.optimizer)

    def _mode(self, training: bool) -> None:
        self.backend.set_mode(training)

    # -- what is compared ------------------------------------------------------------------

    def environment(self) -> dict:
        return {"framework": "pytorch", "framework_version": torch.__version__, "python": platform.python_version(),
                "numpy": np.__version__, "device": self.backend.device.type,
                "cpu_threads": {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}}

    def expects_logits(self) -> bool:
        return True                   # the kit's loss is F.cross_entropy

    def _batch(self, x: np.ndarray, y: np.ndarray):
        return self.backend._to_device(x, y)

    def _inputs(self, x: np.ndarray) -> torch.Tensor:
        """fp32: the kit's own preprocessing (scale, layout, resize on the device); fp64: the same
        scale and resize computed in float64 (reprokit.kits.framework_free.certificate.preprocess64), then NCHW."""
        if self.dtype == torch.float64:
            x64 = cert.preprocess64(x, self.backend.scale, self.backend.resize)
            return torch.from_numpy(x64.transpose(0, 3, 1, 2).copy()).to(self.backend.device)
        xb, _ = self._batch(x, np.zeros(len(x), np.int64))
        return self.backend._inputs(xb)

    def _neutralise(self, t: int) -> None:
        for group in self.backend.optimizer.param_groups:
            group.update(cert.torch_hyperparameters_like_keras(self.optimizer, t))

    def kit_train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]], perturb: bool = False) -> list[float]:
        """The kit's own train_step (fp32) on each batch, from a fresh build, declared differences removed
        step by step; with ``perturb``, the kit's preprocessed inputs moved one float32 ulp up."""
        device = []
        for x, y in batches:
            xb, yb = self._batch(x, y)
            if perturb:
                xf = self.backend._inputs(xb)
                xb = torch.nextafter(xf, torch.full_like(xf, math.inf))
            device.append((xb, yb))
        with NoDropout():
            return cert.kit_train_losses(self.backend, [(b, len(y)) for b, (_, y) in zip(device, batches)],
                                         before_step=self._neutralise)

    def neutralisable(self) -> list[dict]:
        """Differences this side removes from both trajectories, each named."""
        opt = self.optimizer
        out = []
        if opt["name"] == "adam":
            out.append({"field": "Adam epsilon placement", "declared": True,
                        "how": "PyTorch's eps set to eps / sqrt(1 - beta2^t) before step t, which makes "
                               "torch.optim.Adam's update equal Keras 3's"})
        if opt["name"] == "adam" or opt.get("momentum"):
            names = "beta_1 and beta_2 in its bias corrections" if opt["name"] == "adam" else "momentum"
            out.append({"field": "Keras float64 hyper-parameter rounding", "declared": False,
                        "how": f"Keras 3 rounds {names} to float32 even in a float64 model; PyTorch uses the "
                               f"same rounded values (through its lr and "
                               f"{'eps' if opt['name'] == 'adam' else 'momentum'}): "
                               f"a certificate artefact in fp64, no change in fp32"})
        return out

    def train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]],
                     gradients: list[dict[str, np.ndarray]] | None = None) -> list[float]:
        """The kit's step, in the model's dtype: cross-entropy of the logits, zero_grad, backward, step,
        with the differences of neutralisable() removed step by step; each step's canonical gradients
        appended to ``gradients`` where given."""
        self._mode(True)
        optimizer = self.backend.optimizer
        losses = []
        with NoDropout():
            for x, y in batches:
                self._steps += 1
                self._neutralise(self._steps)
                _, yb = self._batch(x, y)
                loss = F.cross_entropy(self.model(self._inputs(x)), yb)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if gradients is not None:
                    gradients.append(self.gradients())
                optimizer.step()
                losses.append(float(loss.detach()))
        return losses

    def training_loss(self, x: np.ndarray, y: np.ndarray) -> float:
        """The loss of a batch in training mode (batch statistics) without an update."""
        self._mode(True)
        with torch.no_grad(), NoDropout():
            _, yb = self._batch(x, y)
            return float(F.cross_entropy(self.model(self._inputs(x)), yb))

    def reset(self) -> None:
        """Leave nothing behind for the next certificate in this process."""
        torch.set_default_dtype(torch.float32)



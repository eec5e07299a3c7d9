"""The PyTorch half of the equivalence certificate: the kit's own model and step, in canonical form.

The model, optimizer, loss and input preprocessing are the Backend's, built from
the spec exactly as a training run builds them; only every Dropout rate is set
to 0 so that two frameworks' random masks cannot differ.
"""
from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from kits.common import certificate as cert
from kits.common.data import Arrays
from kits.pytorch_kit.backend import Backend

COUNTER = "torch.utils.flop_counter.FlopCounterMode"
CONVENTIONS = ("counts only matrix products and convolutions (aten mm/addmm/bmm/convolution and their backward), "
               "2 FLOPs per multiply-accumulate; bias adds, activations, pooling, BatchNorm and the loss are not "
               "counted; a backward convolution counts only the gradients autograd asks for (none for the input image)")


@dataclass
class _Param:
    record: dict
    tensor: torch.Tensor
    to_canonical: Callable[[np.ndarray], np.ndarray]
    from_canonical: Callable[[np.ndarray], np.ndarray]


def _same(a: np.ndarray) -> np.ndarray:
    return a


def _conv_out(w: np.ndarray) -> np.ndarray:       # OIHW -> HWIO
    return w.transpose(2, 3, 1, 0)


def _conv_in(k: np.ndarray) -> np.ndarray:        # HWIO -> OIHW
    return k.transpose(3, 2, 0, 1)


def _dense_maps(flatten_chw: tuple[int, int, int] | None):
    """Linear weight (out, in) <-> canonical kernel (in, out); after a Flatten of a CxHxW map, the
    rows go from PyTorch's (c, h, w) flatten order to the canonical NHWC order (h, w, c)."""
    if flatten_chw is None or flatten_chw[1] * flatten_chw[2] == 1:
        return (lambda w: w.T), (lambda k: k.T)
    c, h, w_ = flatten_chw

    def out(w: np.ndarray) -> np.ndarray:
        return w.reshape(w.shape[0], c, h, w_).transpose(2, 3, 1, 0).reshape(h * w_ * c, w.shape[0])

    def back(k: np.ndarray) -> np.ndarray:
        return k.reshape(h, w_, c, k.shape[1]).transpose(3, 2, 0, 1).reshape(k.shape[1], c * h * w_)
    return out, back


class Certifier:
    framework = "pytorch"

    def __init__(self, spec: dict, arrays: Arrays) -> None:
        self.spec = spec
        self.arrays = arrays
        self.backend = Backend(spec)
        self._build()

    def _build(self) -> None:
        self.backend.build(self.arrays)
        self._steps = 0                   # optimizer steps taken by train_losses since the build
        self.model = self.backend.model
        self.dtype = next(self.model.parameters()).dtype
        for module in self.model.modules():
            if isinstance(module, nn.modules.dropout._DropoutNd):
                module.p = 0.0
        self.params = self._map()

    def use_float64(self) -> None:
        """Build the same model and optimizer again, from the same builder, in float64.

        The default dtype stays float64 from here on: torch.optim creates its step counter
        (which Adam's bias corrections use) in the default dtype at the first step."""
        torch.set_default_dtype(torch.float64)
        self._build()
        if self.dtype != torch.float64:
            raise RuntimeError(f"the float64 rebuild of the PyTorch model has {self.dtype} weights")

    # -- canonical form ----------------------------------------------------------------------

    def _execution_order(self) -> list[tuple[nn.Module, tuple[int, ...]]]:
        """Leaf modules in the order a forward pass calls them, with their input's shape."""
        calls: list[tuple[nn.Module, tuple[int, ...]]] = []
        hooks = [m.register_forward_pre_hook(lambda mod, args: calls.append((mod, tuple(args[0].shape))))
                 for m in self.model.modules() if not list(m.children())]
        size = self.spec["data"]["input_size"]
        was_training = self.model.training
        try:
            self.model.eval()             # no running-statistics update
            with torch.no_grad():
                self.model(torch.zeros(1, 3, size, size, device=self.backend.device, dtype=self.dtype))
        finally:
            for h in hooks:
                h.remove()
            self.model.train(was_training)
        return calls

    def _map(self) -> list[_Param]:
        params: list[_Param] = []
        counters: dict[str, int] = {}
        seen: set[int] = set()
        flatten: tuple[int, int, int] | None = None
        names = {id(m): n for n, m in self.model.named_modules()}
        for module, in_shape in self._execution_order():
            if isinstance(module, nn.Flatten):
                flatten = tuple(in_shape[1:]) if len(in_shape) == 4 else None
                continue
            own = [p for p in module.parameters(recurse=False)]
            if not own or id(module) in seen:
                continue
            seen.add(id(module))
            where = names.get(id(module), "?")
            if isinstance(module, nn.Conv2d):
                if module.groups != 1:
                    raise cert.UnmappableModel(f"PyTorch layer {where} is a grouped convolution (groups={module.groups}), "
                                               f"which has no canonical form here")
                kind, roles = "conv", [("kernel", module.weight, _conv_out, _conv_in), ("bias", module.bias, _same, _same)]
            elif isinstance(module, nn.Linear):
                out, back = _dense_maps(flatten)
                kind, roles = "dense", [("kernel", module.weight, out, back), ("bias", module.bias, _same, _same)]
            elif isinstance(module, nn.BatchNorm2d):
                kind, roles = "batchnorm", [("gamma", module.weight, _same, _same), ("beta", module.bias, _same, _same),
                                            ("moving_mean", module.running_mean, _same, _same),
                                            ("moving_variance", module.running_var, _same, _same)]
            else:
                raise cert.UnmappableModel(f"PyTorch layer {where} ({type(module).__name__}) has weights but no "
                                           f"canonical form (known: Conv2d, Linear, BatchNorm2d)")
            flatten = None
            counters[kind] = counters.get(kind, 0) + 1
            native_names = {id(t): n for n, t in [*module.named_parameters(recurse=False),
                                                  *module.named_buffers(recurse=False)]}
            for role, tensor, to_c, from_c in roles:
                if tensor is None:
                    continue
                canonical_shape = to_c(np.zeros(tuple(tensor.shape), np.float32)).shape
                rec = cert.record(kind, counters[kind], role, canonical_shape,
                                  f"{where}.{native_names.get(id(tensor), role)}", tuple(tensor.shape))
                params.append(_Param(rec, tensor, to_c, from_c))
        mapped = {id(p.tensor) for p in params}
        unused = [n for n, p in self.model.named_parameters() if id(p) not in mapped]
        if unused:
            raise cert.UnmappableModel(f"PyTorch parameters {', '.join(unused[:3])} are not used by a mapped layer "
                                       f"in the forward pass")
        return params

    def records(self) -> list[dict]:
        return [p.record for p in self.params]

    def export(self) -> dict[str, np.ndarray]:
        # A copy: .numpy() shares memory with the tensor, which later steps change in place.
        return {p.record["name"]: np.array(p.to_canonical(p.tensor.detach().cpu().numpy()), order="C", copy=True)
                for p in self.params}

    def load(self, weights: dict[str, np.ndarray]) -> None:
        with torch.no_grad():
            for p in self.params:
                native = np.ascontiguousarray(p.from_canonical(weights[p.record["name"]]))
                p.tensor.copy_(torch.from_numpy(native).to(p.tensor.dtype))
        self.model.zero_grad(set_to_none=True)

    # -- what is compared ------------------------------------------------------------------

    def environment(self) -> dict:
        return {"framework": "pytorch", "framework_version": torch.__version__, "python": platform.python_version(),
                "numpy": np.__version__, "device": self.backend.device.type,
                "cpu_threads": {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}}

    def _batch(self, x: np.ndarray, y: np.ndarray):
        return self.backend._to_device(x, y)

    def _inputs(self, x: np.ndarray) -> torch.Tensor:
        """fp32: the kit's own preprocessing (scale, layout, resize on the device); fp64: the same
        scale and resize computed in float64 (kits.common.certificate.preprocess64), then NCHW."""
        if self.dtype == torch.float64:
            x64 = cert.preprocess64(x, self.backend.scale, self.backend.resize)
            return torch.from_numpy(x64.transpose(0, 3, 1, 2).copy()).to(self.backend.device)
        xb, _ = self._batch(x, np.zeros(len(x), np.int64))
        return self.backend._inputs(xb)

    def logits(self, x: np.ndarray, training: bool) -> list[list[float]]:
        self.backend.set_mode(training)
        with torch.no_grad():
            out = self.model(self._inputs(x))
        return out.double().cpu().tolist()

    def kit_train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]]) -> list[float]:
        """The kit's own train_step (fp32) on each batch; the loss is the one it adds to its sums."""
        return cert.kit_train_losses(self.backend, [(self._batch(x, y), len(y)) for x, y in batches])

    def neutralisable(self) -> list[dict]:
        """Differences this side removes from the certified (fp64) trajectory, each named."""
        opt = self.spec["train"]["optimizer"]
        out = []
        if opt["name"] == "adam":
            out.append({"field": "Adam epsilon placement", "declared": True,
                        "how": "PyTorch's eps set to eps / sqrt(1 - beta2^t) before step t, which makes "
                               "torch.optim.Adam's update equal Keras 3's"})
        if opt["name"] == "adam" or opt.get("momentum"):
            names = "beta_1 and beta_2 in its bias corrections" if opt["name"] == "adam" else "momentum"
            out.append({"field": "Keras float64 hyper-parameter rounding", "declared": False,
                        "how": f"Keras 3 rounds {names} to float32 even in a float64 model; PyTorch uses the "
                               f"same rounded values (through its lr and {'eps' if opt['name'] == 'adam' else 'momentum'}) "
                               f"in the fp64 trajectory only: a certificate artefact, not a difference of the "
                               f"fp32 runs"})
        return out

    def train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]], neutralise: bool = False) -> list[float]:
        """The kit's step, in the model's dtype: cross-entropy of the logits, zero_grad, backward, step.
        With ``neutralise``, the differences of neutralisable() are removed, step by step."""
        self.backend.set_mode(True)
        optimizer, spec_opt = self.backend.optimizer, self.spec["train"]["optimizer"]
        losses = []
        for x, y in batches:
            self._steps += 1
            if neutralise:
                for group in optimizer.param_groups:
                    group.update(cert.torch_hyperparameters_like_keras(spec_opt, self._steps))
            _, yb = self._batch(x, y)
            loss = F.cross_entropy(self.model(self._inputs(x)), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        return losses

    def training_loss(self, x: np.ndarray, y: np.ndarray) -> float:
        """The loss of a batch in training mode (batch statistics) without an update."""
        self.backend.set_mode(True)
        with torch.no_grad():
            _, yb = self._batch(x, y)
            return float(F.cross_entropy(self.model(self._inputs(x)), yb))

    def flops(self, x: np.ndarray, y: np.ndarray) -> dict:
        """Forward, loss and backward of FLOPS_BATCH samples under FlopCounterMode, per sample."""
        n = min(cert.FLOPS_BATCH, len(x))
        _, yb = self._batch(x[:n], y[:n])
        inputs = self._inputs(x[:n])
        self.backend.set_mode(True)
        self.model.zero_grad(set_to_none=True)
        with FlopCounterMode(display=False) as counter:
            loss = F.cross_entropy(self.model(inputs), yb)
            loss.backward()
        self.model.zero_grad(set_to_none=True)
        total = counter.get_total_flops()
        by_op: dict[str, int] = {}
        for op, count in counter.get_flop_counts().get("Global", {}).items():
            name = str(op).split(".")[0].removeprefix("aten::")
            by_op[name] = by_op.get(name, 0) + int(count)
        return {"counter": COUNTER, "conventions": CONVENTIONS, "batch": n,
                "per_sample": {"matmul_conv": total / n, "total": total / n},
                "by_op_per_sample": {k: v / n for k, v in sorted(by_op.items())}}

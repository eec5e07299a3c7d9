"""The PyTorch half of the equivalence certificate: the kit's own model and step, in canonical form.

The model, optimizer, loss and input preprocessing are the Backend's, built from the spec exactly
as a training run builds them. The trace and the dropout passes see the model as it trains; every
other pass runs with dropout switched off by a dispatch mode (so functional dropout is switched off
too), so that two frameworks' random masks cannot differ.
"""
from __future__ import annotations

import math
import platform
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from kits.common import arithmetic, custom
from kits.common import certificate as cert
from kits.pytorch_kit import trace
from kits.pytorch_kit.backend import Backend

aten = torch.ops.aten


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


def _dense_maps(rows: list[int] | None):
    """Linear weight (out, in) <-> canonical kernel (in, out), its rows in canonical (h, w, c) order."""
    return (lambda w: arithmetic.rows_to_canonical(w.T, rows)), (lambda k: arithmetic.rows_from_canonical(k, rows).T)


class _NoDropout(TorchDispatchMode):
    """Dropout off, whether a module or a function call applies it: a mask of ones."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is aten.native_dropout.default:
            return args[0].clone(), torch.ones_like(args[0], dtype=torch.bool)
        if func is aten.bernoulli_.float:
            # Dropout draws keep ~ Bernoulli(q) and divides by q: keep = q makes the mask exactly one.
            return args[0].fill_(trace._positional(func, args, kwargs or {})[1])
        return func(*args, **(kwargs or {}))


def read_optimizer(opt: torch.optim.Optimizer) -> dict:
    """An optimizer read back from the object itself: its class and its first group's settings."""
    g = opt.param_groups[0]
    out = {"class": f"torch.optim.{type(opt).__name__}", "name": type(opt).__name__.lower(), "lr": float(g["lr"]),
           "weight_decay": float(g.get("weight_decay", 0.0))}
    if isinstance(opt, torch.optim.Adam):
        out.update(beta1=float(g["betas"][0]), beta2=float(g["betas"][1]), epsilon=float(g["eps"]),
                   amsgrad=bool(g["amsgrad"]))
    elif isinstance(opt, torch.optim.SGD):
        out.update(momentum=float(g["momentum"]), nesterov=bool(g["nesterov"]), dampening=float(g["dampening"]))
    return out


class Certifier(cert.Side):
    framework = "pytorch"
    backend_class = Backend

    def _build(self) -> None:
        """Build the kit's model and optimizer (again); the first build is traced, later ones (the same
        builder, freshly initialised) reuse what the trace found, by module name and layer number."""
        self.backend.build(self.arrays)
        self._steps = 0                   # optimizer steps taken since the build (for the per-step settings)
        self.model = self.backend.model
        self._canonical()

    def _canonical(self) -> None:
        """The model in canonical form: traced once, then mapped (again after each rebuild)."""
        self.dtype = next(self.model.parameters()).dtype
        if self.trace is None:
            self.trace, order = self._trace()
            names = {id(m): n for n, m in self.model.named_modules()}
            self.order = [names[id(m)] for m in order]
            self.dense_rows: dict[int, list[int] | None] = {}
            params = {id(p): n for n, p in self.model.named_parameters()}
            # weight name -> name of a bias added to that layer's output by another module
            self.outside_bias = {params[w]: params[b] for b, w in self.trace.bias_of.items()
                                 if b in params and w in params}
        self.params = self._map()

    def dropout_off(self) -> None:
        """Nothing to do: every pass but the trace and the dropout passes runs under _NoDropout."""

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

    # -- canonical form ----------------------------------------------------------------------

    def _trace(self):
        """The canonical ops of a forward pass as the kit trains (training mode unless a pitfall keeps the
        model in evaluation mode), and the leaf modules in the order it called them."""
        order: list[nn.Module] = []
        hooks = [m.register_forward_pre_hook(lambda mod, args: order.append(mod))
                 for m in self.model.modules() if not list(m.children())]
        x = self._inputs(self.x_trace)
        try:
            self._mode(True)
            return trace.trace(self.model, x, training=None), order
        except Exception as exc:
            if custom.from_the_kit(exc):
                raise
            last = self._name(order[-1]) if order else "its first layer"
            raise custom.BadModel(f"the model from {self.who} fails on a batch of shape {tuple(x.shape)} in layer "
                                  f"{last}: {custom.one_line(exc)}{custom.where(exc)}") from None
        finally:
            for h in hooks:
                h.remove()

    def _name(self, module: nn.Module) -> str:
        names = {id(m): n for n, m in self.model.named_modules()}
        return f"{names.get(id(module), '?')} ({type(module).__name__})"

    def last_layer(self) -> str:
        modules = dict(self.model.named_modules())
        return self._name(modules[self.order[-1]]) if self.order else "(none)"

    def _map(self) -> list[_Param]:
        params: list[_Param] = []
        counters: dict[str, int] = {}
        seen: set[int] = set()
        modules = dict(self.model.named_modules())
        names = {id(m): n for n, m in modules.items()}
        by_name = dict(self.model.named_parameters())
        claimed = {id(by_name[b]) for b in self.outside_bias.values()}
        for module in (modules[n] for n in self.order):
            own = list(module.parameters(recurse=False))
            if not own or id(module) in seen or all(id(p) in claimed for p in own):
                continue
            seen.add(id(module))
            where = names.get(id(module), "?")
            if isinstance(module, nn.Conv2d):
                if module.groups != 1:
                    raise cert.UnmappableModel(f"PyTorch layer {where} of {self.who} is a grouped convolution "
                                               f"(groups={module.groups}), which has no canonical form here")
                kind, roles = "conv", [("kernel", module.weight, _conv_out, _conv_in), ("bias", module.bias, _same, _same)]
            elif isinstance(module, nn.Linear):
                index = counters.get("dense", 0) + 1
                rows = self.dense_rows.setdefault(index, self.trace.rows.get(id(module.weight)))
                out, back = _dense_maps(rows)
                kind, roles = "dense", [("kernel", module.weight, out, back), ("bias", module.bias, _same, _same)]
            elif isinstance(module, nn.BatchNorm2d):
                kind, roles = "batchnorm", [("gamma", module.weight, _same, _same), ("beta", module.bias, _same, _same),
                                            ("moving_mean", module.running_mean, _same, _same),
                                            ("moving_variance", module.running_var, _same, _same)]
            else:
                raise cert.UnmappableModel(f"PyTorch layer {where} ({type(module).__name__}) of {self.who} has weights "
                                           f"but no canonical form (known: Conv2d, Linear, BatchNorm2d)")
            counters[kind] = counters.get(kind, 0) + 1
            native_names = {id(t): f"{where}.{n}" for n, t in [*module.named_parameters(recurse=False),
                                                               *module.named_buffers(recurse=False)]}
            if kind in ("conv", "dense") and module.bias is None:
                bias = self.outside_bias.get(f"{where}.weight".removeprefix("."))
                if bias is not None:              # added by a module of its own, after this layer
                    roles[1] = ("bias", by_name[bias], _same, _same)
                    native_names[id(by_name[bias])] = bias
            for role, tensor, to_c, from_c in roles:
                if tensor is None:
                    continue
                canonical_shape = to_c(np.zeros(tuple(tensor.shape), np.float32)).shape
                rec = cert.record(kind, counters[kind], role, canonical_shape,
                                  native_names.get(id(tensor), f"{where}.{role}"), tuple(tensor.shape))
                params.append(_Param(rec, tensor, to_c, from_c))
        mapped = {id(p.tensor) for p in params}
        unused = [n for n, p in self.model.named_parameters() if id(p) not in mapped]
        if unused:
            raise cert.UnmappableModel(f"PyTorch parameters {', '.join(unused[:3])} of {self.who} are not used by a "
                                       f"mapped layer in the forward pass")
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

    def expects_logits(self) -> bool:
        return True                   # the kit's loss is F.cross_entropy

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
        self._mode(training)
        with torch.no_grad(), _NoDropout():
            out = self.model(self._inputs(x))
        return out.double().cpu().tolist()

    def train_outputs(self, x: np.ndarray, passes: int) -> list[list[list[float]]]:
        """The outputs of ``passes`` forward passes in training mode, dropout as the kit trains (fp32)."""
        inputs = self._inputs(x)
        self._mode(True)
        with torch.no_grad():
            return [self.model(inputs).double().cpu().tolist() for _ in range(passes)]

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
        with _NoDropout():
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
                               f"same rounded values (through its lr and {'eps' if opt['name'] == 'adam' else 'momentum'}): "
                               f"a certificate artefact in fp64, no change in fp32"})
        return out

    def train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]]) -> list[float]:
        """The kit's step, in the model's dtype: cross-entropy of the logits, zero_grad, backward, step,
        with the differences of neutralisable() removed step by step."""
        self._mode(True)
        optimizer = self.backend.optimizer
        losses = []
        with _NoDropout():
            for x, y in batches:
                self._steps += 1
                self._neutralise(self._steps)
                _, yb = self._batch(x, y)
                loss = F.cross_entropy(self.model(self._inputs(x)), yb)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
        return losses

    def training_loss(self, x: np.ndarray, y: np.ndarray) -> float:
        """The loss of a batch in training mode (batch statistics) without an update."""
        self._mode(True)
        with torch.no_grad(), _NoDropout():
            _, yb = self._batch(x, y)
            return float(F.cross_entropy(self.model(self._inputs(x)), yb))

    def reset(self) -> None:
        """Leave nothing behind for the next certificate in this process."""
        torch.set_default_dtype(torch.float32)


class Captured(Certifier):
    """The model a user's script trains, as the probe captured it at the script's first optimizer step,
    before the step changed it: the same canonical form as a kit model, read from the object itself (a
    setting changed after construction shows), never rebuilt from code. "Training mode" is each module's
    mode as the script trained it; the inputs are the batch its model received, as the script prepared it."""

    def __init__(self, model: nn.Module, optimizer, first_batch: torch.Tensor, expects_logits: bool | None,
                 who: str) -> None:
        self.model, self.who, self.backend, self.trace = model, who, None, None
        self.device = next(model.parameters()).device
        self.trained_modes = {id(m): m.training for m in model.modules()}
        self._expects_logits = expects_logits
        self.x_first = first_batch.detach()[:cert.LOGITS_SAMPLES].float().cpu().numpy().transpose(0, 2, 3, 1).copy()
        self.x_trace = self.x_first[:cert.TRACE_BATCH]
        self._canonical()
        self.optimizer = read_optimizer(optimizer)

    def _mode(self, training: bool) -> None:
        if not training:
            self.model.eval()
            return
        for m in self.model.modules():
            m.training = self.trained_modes[id(m)]

    def _inputs(self, x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).to(self.device, self.dtype)

    def expects_logits(self) -> bool | None:
        return self._expects_logits

    def environment(self) -> dict:
        return {"framework": "pytorch", "framework_version": torch.__version__, "python": platform.python_version(),
                "numpy": np.__version__, "device": self.device.type,
                "cpu_threads": {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}}

    def shared(self) -> list[str]:
        """Layers with weights that the forward pass uses at more than one place: one set of weights, shared."""
        modules = dict(self.model.named_modules())
        counts = {n: self.order.count(n) for n in dict.fromkeys(self.order)}
        return [f"{self._name(modules[n])} at {k} places" for n, k in counts.items()
                if k > 1 and list(modules[n].parameters(recurse=False))]

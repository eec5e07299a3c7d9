"""A PyTorch model in the certificate's canonical form (reprokit/kits/framework_free/certificate.py), however it was
built.

``Canonical`` traces a built model once, maps its weights to canonical names and shapes, exports and
loads them, and runs its passes: the logits with dropout switched off by a dispatch mode (so functional
dropout is off too), and the training-mode passes with dropout as it trains. The kit's certificate side
(reprokit/kits/pytorch_kit/certify.py) builds its model from the spec; ``Captured`` takes the model a user's
script trains, as the probe captured it. Nothing here knows the kit's Backend or its pitfalls.
"""
from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from reprokit.kits.framework_free import arithmetic, custom, model_call, parting
from reprokit.kits.framework_free import certificate as cert
from reprokit.kits.pytorch_kit import layer_settings, trace
from reprokit.kits.pytorch_kit.first_call import batch_of

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


class NoDropout(TorchDispatchMode):
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



def parameter_counts(model: nn.Module) -> dict:
    """Trainable weights, plus BatchNorm's running statistics in the total, as Keras counts them."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    stats = sum(b.numel() for name, b in model.named_buffers() if name.endswith(("running_mean", "running_var")))
    return {"total": trainable + frozen + stats, "trainable": trainable}


class Canonical:
    """A built model's canonical form and passes; subclasses give ``model``, ``who``, ``_mode`` and ``_inputs``."""
    framework = "pytorch"

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
        """Nothing to do: every pass but the trace and the dropout passes runs under NoDropout."""

    # -- canonical form ----------------------------------------------------------------------

    def _trace(self):
        """The canonical ops of a forward pass as the model trains (``_mode(True)``: the kit's training mode,
        or each module's mode as a script trained it), and the leaf modules in the order it called them."""
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
                kind, roles = "conv", [("kernel", module.weight, _conv_out, _conv_in),
                                       ("bias", module.bias, _same, _same)]
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

    def logits(self, x: np.ndarray, training: bool) -> list[list[float]]:
        self._mode(training)
        with torch.no_grad(), NoDropout():
            out = self.model(self._inputs(x))
        return out.double().cpu().tolist()

    def train_outputs(self, x: np.ndarray, passes: int) -> list[list[list[float]]]:
        """The outputs of ``passes`` forward passes in training mode, dropout as the kit trains (fp32)."""
        inputs = self._inputs(x)
        self._mode(True)
        with torch.no_grad():
            return [self.model(inputs).double().cpu().tolist() for _ in range(passes)]

    def layer_outputs(self, x: np.ndarray, training: bool) -> list[tuple[dict, np.ndarray]]:
        """Every leaf module's output in call order, in evaluation or training mode with dropout off (a training
        pass updates BatchNorm's running statistics: load the weights again after it), in canonical layout
        (NHWC; a flatten of an NCHW map in (h, w, c) order), with its settings
        (reprokit/kits/framework_free/parting.py)."""
        names = {id(m): n for n, m in self.model.named_modules()}
        out: list[tuple[dict, np.ndarray]] = []

        def record(module, args, output) -> None:
            if not isinstance(output, torch.Tensor) or not args or not isinstance(args[0], torch.Tensor):
                return
            y, x_in = output.detach().double().cpu().numpy(), args[0]
            if y.ndim == 4:
                y = y.transpose(0, 2, 3, 1)
            elif y.ndim == 2 and x_in.dim() == 4 and y.shape[1] == x_in[0].numel():
                n, c, h, w = x_in.shape              # a flatten of a channels-first map: rows in (h, w, c) order
                y = y.reshape(n, c, h, w).transpose(0, 2, 3, 1).reshape(n, -1)
            shape = list(x_in.shape)
            in_shape = [shape[0], *shape[2:], shape[1]] if len(shape) == 4 else shape
            family, settings = layer_settings.read(module, in_shape)
            out.append((parting.entry(names.get(id(module), "?"), type(module).__name__, family, settings, y.shape),
                        y))
        hooks = [m.register_forward_hook(record) for m in self.model.modules() if not list(m.children())]
        self._mode(training)
        try:
            with torch.no_grad(), NoDropout():
                self.model(self._inputs(x))
        finally:
            for h in hooks:
                h.remove()
        return out

    def gradients(self) -> dict[str, np.ndarray]:
        """The canonical gradients of the last backward pass (parameters that got one)."""
        return {p.record["name"]: p.to_canonical(p.tensor.grad.detach().double().cpu().numpy())
                for p in self.params if p.tensor.grad is not None}


class Captured(Canonical):
    """The model a user's script trains, as the probe captured it at the script's first optimizer step,
    before the step changed it: the same canonical form as a kit model, read from the object itself (a
    setting changed after construction shows), never rebuilt from code. "Training mode" is each module's
    mode as the script trained it; the inputs are the batch its model received, as the script prepared it."""

    def __init__(self, model: nn.Module, optimizer, call: model_call.ModelCall, expects_logits: bool | None,
                 who: str) -> None:
        self.model, self.who, self.trace, self.call = model, who, None, call
        self.device = next(model.parameters()).device
        self.trained_modes = {id(m): m.training for m in model.modules()}
        self._expects_logits = expects_logits
        first_batch = batch_of(call).detach()[:cert.LOGITS_SAMPLES]
        # an image batch (N, C, H, W) in the canonical NHWC; any other batch as it is; integers (indices) kept
        self._images = first_batch.dim() == 4
        kept = first_batch if not first_batch.is_floating_point() else first_batch.float()
        x = kept.cpu().numpy()
        self.x_first = (x.transpose(0, 2, 3, 1) if self._images else x).copy()
        self.x_trace = self.x_first[:cert.TRACE_BATCH]
        if not call.plain():
            # every pass of the certificate calls the model as the script did (its other arguments, the part of
            # the output its loss read); the script stops after its certificate, so the model is not given back
            forward = model.forward
            model.forward = lambda x: call.replay(forward, x)      # type: ignore[method-assign]
        self._canonical()
        self.optimizer = read_optimizer(optimizer)

    def _mode(self, training: bool) -> None:
        if not training:
            self.model.eval()
            return
        for m in self.model.modules():
            m.training = self.trained_modes[id(m)]

    def _inputs(self, x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2) if self._images else x))
        return t.to(self.device, self.dtype) if t.is_floating_point() else t.to(self.device)

    def expects_logits(self) -> bool | None:
        return self._expects_logits

    def environment(self) -> dict:
        return {"framework": "pytorch", "framework_version": torch.__version__, "python": platform.python_version(),
                "numpy": np.__version__, "device": self.device.type,
                "cpu_threads": {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}}

    def modes(self) -> dict:
        """The modules that act otherwise in training (dropout, batch norm) that the script left in evaluation
        mode while it trained, and, where there are any, the trace of the model as built: every module in
        training mode, its state restored after (that pass updates BatchNorm's running statistics)."""
        acting = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm)
        off = [self._name(m) for m in self.model.modules() if isinstance(m, acting) and not self.trained_modes[id(m)]]
        if not off:
            return {"in_eval": [], "ops_as_built": None}
        state = {k: v.clone() for k, v in self.model.state_dict().items()}
        self.model.train()
        try:
            ops = trace.trace(self.model, self._inputs(self.x_trace), training=None).ops
        finally:
            self.model.load_state_dict(state)
            self._mode(True)
        return {"in_eval": off, "ops_as_built": ops}

    def shared(self) -> list[str]:
        """Layers with weights that the forward pass uses at more than one place: one set of weights, shared."""
        modules = dict(self.model.named_modules())
        counts = {n: self.order.count(n) for n in dict.fromkeys(self.order)}
        return [f"{self._name(modules[n])} at {k} places" for n, k in counts.items()
                if k > 1 and list(modules[n].parameters(recurse=False))]

"""PyTorch Lightning's Trainer under the PyTorch probe: observed as a plain loop, bounded through its own limits.

Loaded when the script imports Lightning (``lightning`` or the older ``pytorch_lightning``): a finder on
sys.meta_path waits for the Trainer's module and hooks its ``__init__``. What the probe's own hooks see of a
Trainer is a plain loop's: the global optimizer step hooks, the model's forward passes, the loss, the
DataLoaders' passes. Lightning differs in two ways, which this module covers (read against Lightning 2.6):
- it runs each training step inside ``optimizer.step(closure)``: the step's pre-hook fires before the
  step's forward pass, so at each batch's start (a callback's ``on_train_batch_start``) the probe is told what
  a plain loop's forward pass would tell it first: the trained model, with that batch, before the first
  update; an evaluation before it over (its last pass counted, its epoch ended);
- it fetches a batch ahead of the one it trains on, so a loader's pass ended after N steps would train on
  N + 1 batches: training is bounded by the Trainer's own ``limit_train_batches`` and ``max_epochs``
  instead, set here and declared. Evaluation passes (validation, test) are bounded where their loaders'
  passes end (reprokit/kits/observation/bounds.py): Lightning evaluates every batch it fetched.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import sys
from typing import Any

from reprokit.kits.measurement.phases import EVAL

TRAINER_MODULES = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")
EPOCHS_DEFAULT = 1000          # Lightning's max_epochs where neither max_epochs nor max_steps is given


def install(probe) -> None:
    """The Trainer is hooked once the script imports it (``probe``: reprokit/kits/pytorch_kit/probe.py's TorchProbe)."""
    sys.meta_path.insert(0, _TrainerFinder(probe))


def declared(cut: dict[str, tuple[Any, int]]) -> str:
    """What the bounds changed of a Trainer's arguments (``cut``: name -> (the script's value, the bound's))."""
    changed = ", ".join(f"{name}={new} (the script's: {'the default' if old is None else repr(old)})"
                        for name, (old, new) in cut.items())
    return (f"the script's Lightning Trainer is bounded through its own arguments: {changed} (Lightning fetches a "
            f"batch ahead, so a loader's pass ended at the bound would train on one more); its evaluation passes "
            f"end where their loaders' passes do")


class _TrainerFinder(importlib.abc.MetaPathFinder):
    """Finds the Trainer's module as the other finders do, and hooks the Trainer once the module ran."""

    def __init__(self, probe) -> None:
        self.probe = probe

    def find_spec(self, name, path, target=None):
        if name not in TRAINER_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        real_exec, probe = spec.loader.exec_module, self.probe

        def exec_module(module):
            real_exec(module)
            _hook_trainer(module, probe)
        spec.loader.exec_module = exec_module      # type: ignore[method-assign]
        return spec


def _hook_trainer(module, probe) -> None:
    """Trainer(...) gets the bounds in its arguments and the probe's callback."""
    trainer_class, callback_class = module.Trainer, module.Callback
    real_init = trainer_class.__init__
    signature = inspect.signature(real_init)
    bounds = probe.observer.spec.bounds

    def init(trainer, *args, **kwargs):
        call = signature.bind(trainer, *args, **kwargs)
        arguments = call.arguments
        cut = _limit(arguments, bounds)
        callbacks = arguments.get("callbacks") or []
        callbacks = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
        arguments["callbacks"] = [*callbacks, _probe_callback(callback_class)(probe, cut)]
        if cut:
            probe.notes.append(declared(cut))
        real_init(*call.args, **call.kwargs)
    trainer_class.__init__ = init


def _limit(arguments: dict[str, Any], bounds) -> dict[str, tuple[Any, int]]:
    """The Trainer's arguments held to the bounds: those the bounds made smaller, by name: (the script's, the
    bound's). A fraction of the training batches below 1.0 is the script's own, kept (its batches are not
    known before the Trainer reads its loader)."""
    cut: dict[str, tuple[Any, int]] = {}
    n, limit = bounds.max_steps, arguments.get("limit_train_batches")
    whole = limit is None or isinstance(limit, float) and limit >= 1.0
    if n and (whole or isinstance(limit, int) and not isinstance(limit, bool) and limit > n):
        cut["limit_train_batches"] = limit, n
    epochs, own = bounds.epochs, arguments.get("max_epochs")
    if own is None and arguments.get("max_steps", -1) == -1:
        own = EPOCHS_DEFAULT
    if epochs and (own is None or own == -1 or own > epochs):
        cut["max_epochs"] = arguments.get("max_epochs"), epochs
        if (arguments.get("min_epochs") or 0) > epochs:
            cut["min_epochs"] = arguments["min_epochs"], epochs
    for name, (_, new) in cut.items():
        arguments[name] = new
    return cut


def _probe_callback(base: type) -> type:
    class ProbeCallback(base):      # type: ignore[valid-type, misc]
        """Names the trained model at the first batch's start; says which bounds cut the training."""

        def __init__(self, probe, cut: dict[str, tuple[Any, int]]) -> None:
            super().__init__()
            self.probe, self.cut = probe, cut

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            observer = self.probe.observer
            if observer.phase == EVAL:
                # a plain loop's next forward pass counts the evaluation's last one, then its step ends the epoch;
                # here the step's pre-hook comes first, so both happen now
                observer.epoch_ends()
            if self.probe.model is None:
                # the step's pre-hook comes before its forward pass: the model, as its last outermost pass, called
                # with the batch's first tensor (its output is not seen yet)
                first = _first_tensor(batch)
                self.probe._roots.append((pl_module, () if first is None else (first,), {}, None))

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            observer = self.probe.observer
            observer.training_stops()
            if "limit_train_batches" in self.cut and trainer.num_training_batches < _length(trainer.train_dataloader):
                observer.bounded.add("loader")
            if "max_epochs" in self.cut and trainer.current_epoch + 1 >= self.cut["max_epochs"][1]:
                observer.bounded.add("epochs")
    return ProbeCallback


def _first_tensor(batch: Any) -> Any:
    import torch
    if isinstance(batch, torch.Tensor):
        return batch
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    return next((t for t in map(_first_tensor, items) if t is not None), None)


def _length(loader: Any) -> float:
    try:
        return len(loader)
    except TypeError:                   # an iterable without a length, or several loaders: not known to be cut
        return 0

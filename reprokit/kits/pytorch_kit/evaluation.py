"""The script's evaluation, wherever it runs: the trained model, or an instance of its class made after training.

A tutorial saves its model, makes a new one of the same class, loads the checkpoint into it and tests that one.
Once training is over, the first call of any module of the trained model's class with the same parameters
(names and shapes) gets the trained model's hooks, so its passes are the run's evaluation too.

Where the script's evaluation computes no loss (it only takes the argmax), the probe counts the outputs itself
against the labels of the batch the loop fetched last (its second item, one class index per sample): correct
predictions, and the loss training used on the same outputs (cross_entropy on logits, nll_loss on
log-probabilities), computed by the real functions on the device.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def _shapes(module: torch.nn.Module) -> tuple | None:
    try:
        return tuple((name, tuple(p.shape)) for name, p in module.named_parameters())
    except ValueError:                       # a lazy module's parameters have no shape before its first pass
        return None


def watch_twins(model: torch.nn.Module, over: Callable[[], bool], hook: Callable[[torch.nn.Module], None]) -> None:
    """Give ``hook`` every other module of ``model``'s class with its parameters, at its first call once training
    is ``over`` (before: another model the loop runs beside the trained one, an average of its weights)."""
    cls, shapes = type(model), _shapes(model)
    checked: weakref.WeakSet = weakref.WeakSet([model])
    same: weakref.WeakSet = weakref.WeakSet()
    real_call = cls.__call__

    def call(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if type(module) is cls and module not in checked:
            if module not in same and _shapes(module) == shapes:
                same.add(module)
            if module in same and over():
                checked.add(module)
                hook(module)
            elif module not in same:
                checked.add(module)
        return real_call(module, *args, **kwargs)
    cls.__call__ = call


class OutputCount:
    """The probe's own count of an evaluation pass's outputs, where the script computes no loss of them."""

    def __init__(self) -> None:
        self.losses = {"cross_entropy": F.cross_entropy, "nll_loss": F.nll_loss}   # before the probe wraps them

    def __call__(self, output: Any, labels: Any, expects_logits: bool | None) -> tuple[Any, Any] | None:
        """(summed loss, correct) on the device, or None where the outputs or labels are not a classifier's."""
        if expects_logits is None or not isinstance(output, torch.Tensor) or not isinstance(labels, torch.Tensor):
            return None
        if (output.dim() != 2 or labels.dim() != 1 or labels.shape[0] != output.shape[0]
                or labels.is_floating_point() or labels.is_complex()):
            return None
        if labels.device.type == "cpu" and labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) \
                < output.shape[1]:
            return None                      # not class indices of these outputs
        with torch.no_grad():
            labels = labels.to(output.device, non_blocking=True)
            loss = self.losses["cross_entropy" if expects_logits else "nll_loss"]
            return loss(output.float(), labels, reduction="sum"), (output.argmax(1) == labels).sum()

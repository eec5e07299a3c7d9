"""The call a PyTorch script made of the model it trains, at its first step
(reprokit/kits/framework_free/model_call.py).

The probe keeps the last few outermost module calls before the first optimizer step (their arguments, keyword
arguments and output), and the tensor the script last called ``backward`` on. At the first step the trained
model's call is recorded, and the part of its output the certificate compares is the one the loss's autograd
graph reaches: the part the script's loss read, whatever the loss function.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from reprokit.kits.framework_free import model_call


def is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def _rng(value: Any) -> str | None:
    return "a torch.Generator" if isinstance(value, torch.Generator) else None


def _shape(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')} {tuple(t.shape)}"


def reached_by(loss: torch.Tensor | None) -> Callable[[Any], bool] | None:
    """Whether a tensor's autograd node is in the graph ``loss`` was computed by (None where no loss was seen)."""
    if loss is None or loss.grad_fn is None:
        return None
    seen: set = set()
    stack = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack += [next_node for next_node, _ in node.next_functions]
    return lambda t: isinstance(t, torch.Tensor) and t.grad_fn is not None and t.grad_fn in seen


def record(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any,
           loss: torch.Tensor | None) -> model_call.ModelCall:
    """The trained model's call as the script made it, and the output's part its loss read."""
    call = model_call.record(type(module).__name__, module.forward, args, kwargs, is_tensor, _rng, _shape)
    holder: Any = args if call.batch_at[0][0] == "index" else kwargs
    batch = holder[call.batch_at[0][1]]
    for step in call.batch_at[1:]:
        batch = batch[step[1]]
    rows = int(batch.shape[0]) if batch.dim() else None
    if output is None:         # a trainer's step calls the model after the probe takes it (Lightning's)
        call.part_why = "its whole output: the trainer calls the model inside the step, after the probe takes it"
        return call
    call.part, call.part_why = model_call.choose_part(output, is_tensor, reached_by(loss), rows)
    return call


def batch_of(call: model_call.ModelCall) -> torch.Tensor:
    """The batch the recorded call passed."""
    arg = (call.args[call.batch_at[0][1]] if call.batch_at[0][0] == "index" else call.kwargs[call.batch_at[0][1]])
    value = arg.value
    for step in call.batch_at[1:]:
        value = value[step[1]]
    return value


class LossSeen:
    """``Tensor.backward`` and ``torch.autograd.backward`` watched until the first step: the last tensor they
    were called on (the script's loss, or a scaler's scaled loss), whose graph says which output it read."""

    def __init__(self) -> None:
        self.last: torch.Tensor | None = None
        self.scaler: float | None = None          # an AMP GradScaler's factor, where the loss went through one
        self._real = (torch.Tensor.backward, torch.autograd.backward)
        self._scale = torch.amp.GradScaler.scale

        def scale(scaler: Any, outputs: Any) -> Any:
            if scaler.is_enabled():
                self.scaler = float(scaler.get_scale())
            return self._scale(scaler, outputs)
        torch.amp.GradScaler.scale = scale               # type: ignore[method-assign]

        def tensor_backward(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            self.last = tensor
            return self._real[0](tensor, *args, **kwargs)

        def autograd_backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            first = tensors[0] if isinstance(tensors, (tuple, list)) and tensors else tensors
            if isinstance(first, torch.Tensor):
                self.last = first
            return self._real[1](tensors, *args, **kwargs)
        torch.Tensor.backward = tensor_backward          # type: ignore[method-assign]
        torch.autograd.backward = autograd_backward      # type: ignore[assignment]

    def stop(self) -> None:
        """After the first step: the functions as they were (no cost per step), the loss let go."""
        torch.Tensor.backward, torch.autograd.backward = self._real     # type: ignore[method-assign]
        torch.amp.GradScaler.scale = self._scale                          # type: ignore[method-assign]
        self.last = None

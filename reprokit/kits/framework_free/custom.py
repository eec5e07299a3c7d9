"""A user's own code, named in the spec as "module:function" on the kit's path: model builders and hooks.

The hooks (the experiment's [hooks]) are the user's input pipeline, evaluation step and metrics, each
called with the model's options first:

- input(options, split, x, y, batch_size, epoch): the split's batches, (inputs, labels) pairs, for the
  uint8 NHWC arrays x and the int64 labels y ("train" each epoch, "test" with epoch 0);
- evaluate(options, model, inputs): the evaluation step's outputs (logits) for a batch of model inputs;
- metrics(options): a fresh object per phase with update(outputs, labels, loss) after every step and
  result() -> {"loss", "accuracy"} at the phase's end, the figures the run reports.
"""
from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reprokit.kits.contract.names import label
from reprokit.kits.contract.spec import RunSpec


class BadModel(Exception):
    """A user's builder or model that cannot be run as the experiment says (its message is one sentence)."""


def load_builder(ref: str, what: str = "model builder") -> Callable[..., Any]:
    module, _, function = ref.partition(":")
    try:
        builder: Callable[..., Any] = getattr(importlib.import_module(module), function)
        return builder
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(f"cannot load the {what} {ref!r} ({exc}); the experiment's folder must be on "
                           f"the kit's path (reprokit adds the --experiments folders)") from None


def hook(spec: RunSpec, name: str, framework: str) -> Callable[..., Any] | None:
    """The user's hook for this framework, bound to the model's options, or None where the spec names none."""
    ref = spec.hooks.of(name, framework)
    if ref is None:
        return None
    fn = load_builder(ref, f"{name} hook")
    options = spec.model.options

    def call(*args: Any) -> Any:
        return fn(options, *args)
    call.ref = ref                  # type: ignore[attr-defined]  # the backends name the hook by it
    return call


def who(spec: RunSpec, framework: str) -> str | None:
    """How a certificate names the model: the user's builder, or the kit's own model."""
    model = spec.model
    return model.builder(framework) if model.name == "custom" else f"the {label(framework)} kit's {model.name}"


def one_line(exc: BaseException) -> str:
    """An exception as one short sentence fragment: its type and its message's first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def from_the_kit(exc: BaseException) -> bool:
    """Was it raised by the kit's own code (a bug to show with its traceback, not the user's model)?"""
    frames = traceback.extract_tb(exc.__traceback__)
    kits = Path(__file__).resolve().parents[1]
    return bool(frames) and kits in Path(frames[-1].filename).resolve().parents


def where(exc: BaseException) -> str:
    """The innermost line of the user's own code (outside the kit and the frameworks) that raised."""
    kits = Path(__file__).resolve().parents[1]
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = Path(frame.filename)
        if "site-packages" not in path.parts and kits not in path.resolve().parents and path.suffix == ".py":
            return f" ({path.name}, line {frame.lineno})"
    return ""


def build(ref: str, options: dict[str, Any], input_size: int, num_classes: int, expected: type, expected_name: str,
          framework: str) -> Any:
    """Call a user's builder; whatever goes wrong is one sentence naming it."""
    try:
        model = load_builder(ref)(options, input_size, num_classes)
    except Exception as exc:
        raise BadModel(f"the {framework} model builder {ref} raised {one_line(exc)}{where(exc)}") from None
    if not isinstance(model, expected):
        raise BadModel(f"the {framework} model builder {ref} returned a {type(model).__name__}, "
                       f"not a {expected_name}")
    return model

"""A user's own model builders, named in the spec as "module:function" on the kit's path."""
from __future__ import annotations

import importlib
import traceback
from pathlib import Path

from kits.common.names import label
from kits.common.spec import RunSpec


class BadModel(Exception):
    """A user's builder or model that cannot be run as the experiment says (its message is one sentence)."""


def load_builder(ref: str):
    module, _, function = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(f"cannot load the model builder {ref!r} ({exc}); the experiment's folder must be on "
                           f"the kit's path (reprokit adds the --experiments folders)") from None


def who(spec: RunSpec, framework: str) -> str:
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


def build(ref: str, options: dict, input_size: int, num_classes: int, expected: type, expected_name: str,
          framework: str):
    """Call a user's builder; whatever goes wrong is one sentence naming it."""
    try:
        model = load_builder(ref)(options, input_size, num_classes)
    except Exception as exc:
        raise BadModel(f"the {framework} model builder {ref} raised {one_line(exc)}{where(exc)}") from None
    if not isinstance(model, expected):
        raise BadModel(f"the {framework} model builder {ref} returned a {type(model).__name__}, "
                       f"not a {expected_name}")
    return model

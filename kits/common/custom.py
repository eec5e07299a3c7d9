"""A user's own model builders, named in the spec as "module:function" on the kit's path."""
from __future__ import annotations

import importlib


def load_builder(ref: str):
    module, _, function = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(f"cannot load the model builder {ref!r} ({exc}); the experiment's folder must be on "
                           f"the kit's path (reprokit adds the --experiments folders)") from None

"""The named datasets served by library, wherever the library is importable, and their published files by URL.

One layer per library, whatever the run's framework: torchvision.datasets in a JAX run (Equinox's MNIST
tutorial), keras.datasets beside JAX, tfds in either. Each layer is installed when the script first imports its
library (at once where it is imported already: the TensorFlow probe imports keras), so a library the script
never imports is never loaded by the kit; one that is not importable in the run's environment
(importlib.util.find_spec) is left alone. The URL layer (urls.py) is the standard library's and always installed.
Every probe's stage_data calls ``install``; each layer declares its shims when it is installed.

Each module here imports its library inside its functions only (tests/test_layering.py holds it): the package
is imported in every environment.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from reprokit.kits.served_data import (
    keras_datasets,
    requests_session,
    tfds_datasets,
    torch_hub,
    torchvision_datasets,
    urls,
)
from reprokit.kits.training_loop.staged_data import StagedData


def install(named: StagedData, tfds_root: Path | None) -> list[str]:
    """The URL layer now, each library's layer when the script imports the library; the shims declared now (the
    libraries' layers add theirs to ``named.declared`` as they are installed)."""
    layers: dict[str, Callable[[], list[str]]] = {
        "torch": torch_hub.install, "torchvision": lambda: torchvision_datasets.install(named),
        "keras": lambda: keras_datasets.install(named), "tensorflow_datasets": lambda: tfds_datasets.install(
            named, tfds_root), "requests": lambda: requests_session.install(named)}
    importable = [library for library in layers if importlib.util.find_spec(library) is not None]
    shims = urls.install(named)
    if importable:
        shims.append(f"the data layers of {', '.join(importable)} (importable here) are installed when the script "
                     f"imports each")
    hook = next((f for f in sys.meta_path if isinstance(f, _AfterImport)), None) or _AfterImport()
    for library in importable:
        if library in sys.modules:
            shims += layers[library]()
        else:
            hook.pending[library] = lambda install=layers[library]: named.declared.extend(install())
    if hook not in sys.meta_path:
        sys.meta_path.insert(0, hook)
    return shims


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs an action once a top-level package has run its own ``__init__``: the script's first import of it."""

    def __init__(self) -> None:
        self.pending: dict[str, Callable[[], Any]] = {}

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> Any:
        if fullname not in self.pending:
            return None
        spec = next((found for finder in sys.meta_path if finder is not self and hasattr(finder, "find_spec")
                     and (found := finder.find_spec(fullname, path, target)) is not None), None)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            action = self.pending.pop(fullname, None)
            if action is not None:
                action()
        spec.loader.exec_module = exec_module     # type: ignore[method-assign]
        return spec

"""The bounds on a PyTorch script's DataLoader passes (reprokit/kits/observation/bounds.py), where its loop takes
batches.

``DataLoader.__iter__`` gives each pass a bounded iterator, reported to the observer with the loader's
settings. A subclass with an ``__iter__`` of its own (Accelerate's DataLoaderShard, which fetches one batch ahead
of the one it yields) is bounded where the script's loop meets it, its own iteration: its inner call of
``DataLoader.__iter__`` runs unbounded, so that a loader that reads ahead ends after the same N steps as any other.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _DatasetKind

from reprokit.kits.contract import settings as settings_lib
from reprokit.kits.observation.bounds import Bounded


class _Bounded(Bounded):
    """A DataLoader's pass, bounded. Where the bound ends it, the rest of its sampler's indices are drawn (no
    samples): a sampler given the script's generator draws from it again at its end (RandomSampler), so the
    next pass's order is the one an unbounded run gets."""

    def _rest(self) -> None:
        if getattr(self._inner, "_dataset_kind", None) == _DatasetKind.Map:      # an iterable dataset never ends
            for _ in self._inner._sampler_iter:
                pass


def install(probe: Any) -> None:
    """Every DataLoader pass bounded and reported to ``probe.observer`` (a subclass's own iteration, not its
    inner one)."""
    real_iter = DataLoader.__iter__

    def bounded(loader: DataLoader, inner: Any) -> Bounded:
        model = probe.model
        evaluating = not torch.is_grad_enabled() or (model is not None and not model.training)
        return _Bounded(inner, probe.observer.loader_pass(id(loader), loader.batch_size, loader.num_workers,
                                                          loader_settings(loader), evaluating))

    def bounded_iter(loader: DataLoader) -> Any:
        if _own_iter(type(loader)) is not None:          # a subclass's iteration calls it: bounded outside
            return real_iter(loader)
        return bounded(loader, real_iter(loader))

    def wrap(cls: type) -> None:
        own = cls.__dict__.get("__iter__")
        if own is None or getattr(own, "bounded", False):
            return

        def outer(loader: DataLoader) -> Any:
            return bounded(loader, own(loader))
        outer.bounded = True                             # type: ignore[attr-defined]
        cls.__iter__ = outer                             # type: ignore[method-assign]
    DataLoader.__iter__ = bounded_iter                   # type: ignore[method-assign]
    for cls in _subclasses(DataLoader):
        wrap(cls)
    before = DataLoader.__dict__.get("__init_subclass__")

    def init_subclass(cls: type, **kwargs: Any) -> None:
        (before.__func__(cls, **kwargs) if before is not None else super(DataLoader, cls).__init_subclass__(**kwargs))
        wrap(cls)
    DataLoader.__init_subclass__ = classmethod(init_subclass)     # type: ignore[assignment]


def _own_iter(cls: type) -> Callable[..., Any] | None:
    """The nearest ``__iter__`` a DataLoader subclass defines itself, else None."""
    for klass in cls.__mro__:
        if klass is DataLoader:
            return None
        if "__iter__" in klass.__dict__:
            return klass.__dict__["__iter__"]         # type: ignore[no-any-return]
    return None


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def loader_settings(loader: DataLoader) -> dict[str, Any]:
    """A DataLoader's own workers, prefetch (prefetch_factor batches per worker; none without workers) and
    pinned memory."""
    read, workers = settings_lib.read, loader.num_workers
    ahead = (loader.prefetch_factor or 0) * workers
    return {"loader.workers": read(workers, "DataLoader.num_workers (0: batches are made in the loop's process)"),
            "loader.prefetch": read(ahead, f"DataLoader.prefetch_factor {loader.prefetch_factor!r} x num_workers "
                                           f"{workers}"),
            "loader.pin_memory": read(bool(loader.pin_memory), "DataLoader.pin_memory")}


def no_loader(why: str) -> dict[str, Any]:
    return {"loader.workers": settings_lib.read(0, why), "loader.prefetch": settings_lib.read(0, why),
            "loader.pin_memory": settings_lib.not_reported(why)}

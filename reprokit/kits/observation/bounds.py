"""How the probe bounds a user's script, whatever the framework: each loader's pass, and what it declares.

The spec's bounds (reprokit/kits/contract/spec.py ``Bounds``) hold a script to N training steps per epoch, E epochs
and evaluation passes of at least M batches and M x 100 samples. They act where the script's loop takes
its batches, a loader's iterator (``Bounded``), so the loop sees the loader run out and the script goes on
as written: a pass over the training loader ends after N steps, and after the E-th epoch at once, so the
script goes on to what it does after training (a checkpoint, a reloaded model's test); a pass with no
training step in it (an evaluation) ends after max(M batches, M x 100 samples); once training is over, a
pass over a loader the last epoch already evaluated ends at once (a later epoch's evaluation of the same
weights). A loop that takes no batches from a loader (slicing tensors by index) cannot be ended that way:
the probe stops the script after N x E training steps in all (``StopScript``), before its evaluation.

An error the script raises after its last bounded epoch's training (its own evaluation's, a plot's) leaves
the run ok with the figures it got, and a note naming the error, its file and line, whether a bound could have
caused it, and the option that lifts the bounds (``after_training``).
"""
from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any, Protocol

from reprokit.kits.contract.spec import Bounds, ScriptSpec
from reprokit.kits.measurement.hook_clock import own_time


class Observer(Protocol):
    """What the bounds read and set of the probe's observer (reprokit/kits/observation/observe.py), which holds them:
    named here, so this module needs nothing of the observer's (which imports the bounds)."""
    spec: ScriptSpec
    steps: int
    epoch: int
    bounded: set[str]
    fetched_from: LoaderPass | None

    def training_stops(self) -> None: ...

    def training_over(self) -> bool: ...

UNBOUNDED = "`reprokit reproduce --profile full` runs the script as written, unbounded"


class StopScript(BaseException):
    """Raised inside the script's training step by the probe's bound: the run ends there, cleanly.

    A BaseException, as KeyboardInterrupt is, so that a script's ``except Exception`` does not swallow it."""


def batch_length(batch: Any) -> int | None:
    """The samples in a batch as a loader gives it (a tensor, or a tuple, list or dict whose first item is one)."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) and shape[0] is not None else None
    if isinstance(batch, (tuple, list)) and batch:
        return batch_length(batch[0])
    if isinstance(batch, dict) and batch:
        return batch_length(next(iter(batch.values())))
    return None


def labels_of(batch: Any, n: int | None) -> Any:
    """The batch's labels where it is (inputs, labels, ...) with one label per sample, else None."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        return None
    shape = getattr(batch[1], "shape", None)
    return batch[1] if shape is not None and len(shape) == 1 and shape[0] == n else None


class LoaderPass:
    """One pass over a loader, bounded: it ends after N training steps; where no training step came (an
    evaluation pass), after M batches and at least M x 100 samples; or at once (``ends``: the bound's name)."""

    def __init__(self, observer: Observer, loader_id: int, batch_size: int | None, workers: int | None,
                 settings: dict[str, Any] | None = None, evaluating: bool = False, ends: str | None = None) -> None:
        self.observer, self.loader_id, self.steps0, self.fetched = observer, loader_id, observer.steps, 0
        self.batch_size, self.workers = batch_size, workers
        # its loader.* settings (reprokit/kits/contract/settings.py), as the framework says
        self.settings = settings or {}
        self.evaluating, self.ends = evaluating, ends
        self.samples: int | None = 0         # samples fetched (None once a batch had no length)
        self.labels: Any = None              # the last batch's labels, where it has them
        self.used = 0                        # batches a forward pass took: fetched - used were read ahead

    @own_time
    def more(self) -> bool:
        observer = self.observer
        bounds, done = observer.spec.bounds, observer.steps - self.steps0
        if self.ends:
            observer.bounded.add(self.ends)
            return False
        # a loader that reads one batch ahead of the one it yields (Accelerate's DataLoaderShard) fetched it before
        # the step it waits for: counted as that step's, so that it too ends after N steps
        if bounds.max_steps and done + (self.fetched - self.used if done else 0) >= bounds.max_steps:
            observer.bounded.add("loader")
            return False
        if bounds.eval_steps and done == 0 and self.fetched >= bounds.eval_steps and (
                self.samples is None or self.samples >= (bounds.eval_samples or 0)):
            observer.bounded.add("evaluation")
            return False
        self.fetched += 1
        observer.fetched_from = self
        return True

    @own_time
    def took(self, batch: Any) -> None:
        n = batch_length(batch)
        self.samples = None if n is None or self.samples is None else self.samples + n
        self.labels = labels_of(batch, n)

    @own_time
    def ran_out(self) -> None:
        """The pass ended (its bound or the loader's end): where training steps took its batches, training stops."""
        if self.observer.steps > self.steps0:
            self.observer.training_stops()


class Bounded:
    """A loader's iterator, ended where its pass's bounds say (the script's loop sees it run out)."""

    def __init__(self, inner: Any, bound: LoaderPass) -> None:     # a framework's iterator (some have a len)
        self._inner, self._bound, self._cut = inner, bound, False

    def __iter__(self) -> Bounded:
        return self

    def __next__(self) -> Any:
        if not self._bound.more():
            self._bound.ran_out()
            if not self._cut:
                self._cut = True
                self._rest()
            raise StopIteration
        try:
            batch = self._fetch()
        except StopIteration:
            self._bound.ran_out()
            raise
        self._bound.took(batch)
        return batch

    def _fetch(self) -> Any:
        return next(self._inner)

    def _rest(self) -> None:
        """The bound ended the pass before the loader ran out: what the rest of an unbounded pass would change
        besides its batches (a framework's sampler state), done here, without them."""

    def __len__(self) -> int:
        return len(self._inner)


# -- what the run declares ----------------------------------------------------------------------------


def declared(b: Bounds) -> list[str]:
    """The bounds as a shim: what each one does to the script's loops."""
    if not (b.max_steps or b.epochs or b.eval_steps):
        return []
    parts = [f"{b.max_steps} training steps per epoch" if b.max_steps else None,
             f"{b.epochs} epoch(s)" if b.epochs else None,
             f"evaluation passes of {b.eval_steps} batches and at least {b.eval_samples} samples"
             if b.eval_steps else None]
    how = [f"a pass over the training loader ends after {b.max_steps} steps" if b.max_steps else None,
           "after the last epoch it ends at once, so the loop sees it run out and the script goes on to what it "
           "does after training; once training is over, a pass over a loader the last epoch already evaluated "
           "ends at once too" if b.epochs else None,
           f"a pass with no training step in it (an evaluation) ends after max({b.eval_steps} batches, "
           f"{b.eval_samples} samples)" if b.eval_steps else None,
           f"a loop that takes no batches from a loader (slicing tensors by index) is stopped after "
           f"{b.max_steps} x {b.epochs} training steps in all, before what it does after training"
           if b.max_steps and b.epochs else None]
    return [f"bounded to {', '.join(p for p in parts if p)}: {'; '.join(h for h in how if h)}"]


def ended(observer: Observer, stopped: bool) -> str:
    """How the script ended, in words (``stopped``: the probe's StopScript ended it)."""
    if stopped:
        why = ("its loop takes no batches from a loader, so the bound cannot end it; what the script does after "
               "training did not run" if "steps" in observer.bounded else "what the script does after training "
               "did not run")
        return f"the probe stopped the script at its bound ({', '.join(sorted(observer.bounded))}): {why}"
    if observer.bounded:
        return f"the script ran to its end, bounded ({', '.join(sorted(observer.bounded))})"
    return "the script ran to its end"


def after_training(observer: Observer, exc: BaseException, work: Path) -> dict[str, Any] | None:
    """An exception the script raised once its bounded training was over (its last epoch's training ran, and
    none was under way): what the run's result says of it (the run keeps its figures), else None (the run
    failed; unbounded, an error is the script's as written)."""
    if not isinstance(exc, Exception) or isinstance(exc, StopScript) or not observer.training_over():
        return None
    where = _innermost(exc, work)
    file, line, code = where if where else ("?", None, "")
    bounded = sorted(observer.bounded)
    error = {"error": type(exc).__name__, "message": str(exc), "file": file, "line": line, "code": code,
             "bounded": bounded}
    text = (f"after training ({observer.steps} step(s) in {observer.epoch} epoch(s)) the script raised "
            f"{error['error']}: {error['message']} at {file} line {line}" + (f" (`{code}`)" if code else ""))
    if observer.bounded:
        lift = UNBOUNDED + ("; --epochs N sets the epochs alone" if "epochs" in observer.bounded else "")
        text += f"; a bound could have caused it: it came {_cut(observer)}; {lift}"
    else:
        text += "; no bound cut any of its passes, so the script raises it unbounded too"
    return {"ended": f"the script raised {error['error']} after training; the run keeps what it measured",
            "note": text, "error": error}


def _cut(observer: Observer) -> str:
    """What the bounds cut of the script's passes, in words."""
    b, hit = observer.spec.bounds, observer.bounded
    parts = []
    if hit & {"loader", "epochs"}:
        parts.append("after training bounded to " + " and ".join(
            x for x in (f"{b.max_steps} step(s) per epoch" if "loader" in hit else "",
                        f"{b.epochs} epoch(s)" if "epochs" in hit else "") if x))
    if "evaluation" in hit:
        parts.append(f"with evaluation passes bounded to max({b.eval_steps} batches, {b.eval_samples} samples)")
    return ", ".join(parts) + ", shorter than the script's own"


def _innermost(exc: BaseException, work: Path) -> tuple[str, int | None, str] | None:
    """Where the script's own files raised it (relative to its folder), else the innermost frame: file, line, code."""
    frames = traceback.extract_tb(exc.__traceback__)
    folder = work.resolve()
    own = [f for f in frames if Path(f.filename).resolve().is_relative_to(folder)]
    if not frames:
        return None
    where = (own or frames)[-1]
    name = Path(where.filename).resolve().relative_to(folder).as_posix() if own else where.filename
    return name, where.lineno, where.line or ""

"""What the probe sees of a user's own script while it trains, whatever the framework.

Each framework's probe (kits/pytorch_kit/probe.py, kits/tensorflow_kit/probe.py) calls an ``Observer``
from the framework's own hooks: a forward pass of the trained model (its batch size, grad and module
mode), the start and end of each optimizer step, the loss's inputs, a host synchronisation in the
script's own code, a pass over a loader starting. From those alone it knows the phases: a forward
pass followed by an optimizer step is training; a forward pass with no step after it, or in other
modes than training's, is evaluation. A run of training steps is an epoch's training, the evaluation
after it the epoch's evaluation, and a new pass over the training loader a new epoch. It takes the
same readings as a kit run, into the same ``Measurements``: steps timed in synchronised windows after
the warmup steps, memory by phase, data wait, the batches the model received, and its own count of
the loss and the correct predictions from the loss's inputs.

It also bounds the run (the spec's ``bounds``): a pass over a loader ends after N training steps, or
after M batches where no step came (an evaluation pass), and the script stops at the first step past E
epochs (``StopScript``, raised inside the script's own step); a loop without a loader stops after N x E
steps.
"""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from kits.common.co_load import CoLoad
from kits.common.energy import Energy
from kits.common.measure import WindowTimer, now
from kits.common.phases import EVAL, TRAIN, WARMUP, PhaseMemory
from kits.common.progress import Progress
from kits.common.spec import ScriptSpec
from kits.common.training import Measurements

P = ParamSpec("P")
R = TypeVar("R")


class HookClock:
    """The time the probe's own code takes on the script's path (hooks, counting, bookkeeping; the outermost
    hook call counts, so nested ones are not counted twice): the probe's direct cost per step. The Observer
    keeps what it took over the measured steps (after warmup: a trace's one-off work is not a step's)."""

    seconds = 0.0
    _depth = 0
    _waited = 0.0         # device waits inside the current outer hook, taken off when it ends (so a reading
                          # between hooks never holds a wait's subtraction without its hook's addition)


def own_time(fn: Callable[P, R]) -> Callable[P, R]:
    """Count a hook's time on HookClock."""
    @functools.wraps(fn)
    def timed(*args: P.args, **kwargs: P.kwargs) -> R:
        if HookClock._depth:
            return fn(*args, **kwargs)
        HookClock._depth += 1
        t0 = now()
        try:
            return fn(*args, **kwargs)
        finally:
            HookClock.seconds += now() - t0 - HookClock._waited
            HookClock._waited = 0.0
            HookClock._depth -= 1
    return timed


def unclocked(fn: Callable[P, R]) -> Callable[P, R]:
    """A wait for the device inside a hook (a kit run's timing waits as long, at the same edges): not the probe's
    own work, so HookClock leaves it out."""
    @functools.wraps(fn)
    def waits(*args: P.args, **kwargs: P.kwargs) -> R:
        t0 = now()
        try:
            return fn(*args, **kwargs)
        finally:
            if HookClock._depth:
                HookClock._waited += now() - t0
    return waits


class StopScript(BaseException):
    """Raised inside the script's training step by the probe's bound: the run ends there, cleanly.

    A BaseException, as KeyboardInterrupt is, so that a script's ``except Exception`` does not swallow it."""


@dataclass
class Forward:
    batch: int
    grad: bool
    training: bool                     # the module's mode (PyTorch), or the call's training argument (Keras)
    wait: float = 0.0                  # seconds since the last step ended (the time it waited for this batch)
    # the loss's (summed loss, correct) for this batch, on the device
    counts: list[tuple[Any, Any]] = field(default_factory=list)


class LoaderPass:
    """One pass over a loader, bounded: it ends after N training steps, or after M batches where no training
    step came (an evaluation pass)."""

    def __init__(self, observer: Observer, loader_id: int, batch_size: int | None, workers: int | None,
                 settings: dict[str, Any] | None = None) -> None:
        self.observer, self.loader_id, self.steps0, self.fetched = observer, loader_id, observer.steps, 0
        self.batch_size, self.workers = batch_size, workers
        self.settings = settings or {}       # its loader.* settings (kits/common/settings.py), as the framework says

    @own_time
    def more(self) -> bool:
        bounds, done = self.observer.spec.bounds, self.observer.steps - self.steps0
        if bounds.max_steps and done >= bounds.max_steps:
            self.observer.bounded.add("loader")
            return False
        if bounds.eval_steps and done == 0 and self.fetched >= bounds.eval_steps:
            self.observer.bounded.add("evaluation")
            return False
        self.fetched += 1
        self.observer.fetched_from = self
        return True


class Bounded:
    """A loader's iterator, ended where its pass's bounds say (the script's loop sees it run out)."""

    def __init__(self, inner: Any, bound: LoaderPass) -> None:     # a framework's iterator (some have a len)
        self._inner, self._bound = inner, bound

    def __iter__(self) -> Bounded:
        return self

    def __next__(self) -> Any:
        if not self._bound.more():
            raise StopIteration
        return self._fetch()

    def _fetch(self) -> Any:
        return next(self._inner)

    def __len__(self) -> int:
        return len(self._inner)


class Observer:
    def __init__(self, spec: ScriptSpec, sync: Callable[[], object], phases: PhaseMemory,
                 memory_now: Callable[[], int], progress: Progress, energy: Energy) -> None:
        self.spec, self.phases, self.memory_now, self.progress = spec, phases, memory_now, progress
        self.sync = unclocked(sync)
        self.m = Measurements(window_steps=spec.measure.window_steps)
        self.timer = WindowTimer(spec.measure.window_steps, self.sync)
        self.beside = CoLoad()
        self.energy = energy
        self.m.step_timing = self.timer.method
        self.phase, self.epoch, self.steps, self.in_phase = WARMUP, 1, 0, 0
        self.pending: Forward | None = None          # the last forward pass, not yet known to be training or not
        self.training_modes: tuple[bool, bool] | None = None
        self.sums: dict[str, list[tuple[Any, Any]]] = {"train": [], "eval": []}
        self.epoch_sums: list[dict[str, Any]] = []     # an epoch's sums (lists) and counts (ints)
        self.seen: dict[str, Any] = {"train_forwards": 0, "eval_forwards": 0, "eval_mode_in_train": 0,
                                     "grad_enabled_in_eval": 0, "loss_input_probe": None}
        self.syncs: Counter[str] = Counter()         # host synchronisations in the script's code, by phase
        self.loaders: list[LoaderPass] = []
        self.fetched_from: LoaderPass | None = None     # the pass the last batch came from, since the last step
        self.training_loader: int | None = None         # the loader the training steps' batches come from
        self.bounded: set[str] = set()
        self.t_step_end: float | None = None
        self.t_epoch: float | None = None
        self.t_eval: float | None = None
        self.t_measured: float | None = None
        self.epoch_samples = self.epoch_steps = self.eval_steps = self.eval_samples = 0
        self.train_part: dict[str, Any] | None = None  # the epoch's training, once it ended
        self.own_s = 0.0                             # the probe's own time over the measured steps (HookClock)
        self._own_mark: float | None = None
        self.at_first_step: list[Callable[[], object]] = []     # called once the model is known, its device too

    # -- from the framework's hooks -----------------------------------------------------------------

    @own_time
    def forward(self, batch: int, grad: bool, training: bool, timed: bool = True) -> None:
        """A forward pass of the trained model begins (``timed``: now, so the time since the last step is the
        wait for its batch; a traced function's passes are reported after its call, and their wait comes from
        the loader's own time, ``fetched``)."""
        t = now()
        if self.pending is not None and self.steps:      # the last one had no step after it: evaluation
            self._evaluation(self.pending)
        elif (self.phase != EVAL and self.steps and self.training_modes is not None
              and (grad, training) != self.training_modes):
            self._to_eval()
        self.pending = Forward(batch, grad, training)
        if timed and self.phase != EVAL and self.t_measured is not None and self.t_step_end is not None:
            self.pending.wait = t - self.t_step_end

    @own_time
    def loss(self, loss_sum: Any, correct: Any) -> None:
        """The loss of the pending forward pass, counted by the probe (device values, read once at the end)."""
        if self.pending is not None:
            self.pending.counts.append((loss_sum, correct))

    @own_time
    def step_begins(self) -> None:
        """An optimizer step begins: an evaluation before it has ended its epoch; past the bounds, stop."""
        if not self.steps:
            for call in self.at_first_step:
                call()
        if self.phase == EVAL:
            self._end_epoch()
        bounds = self.spec.bounds
        if bounds.epochs and self.epoch > bounds.epochs:
            self.bounded.add("epochs")
            raise StopScript
        if (bounds.epochs and bounds.max_steps and self.training_loader is None
                and self.steps >= bounds.epochs * bounds.max_steps):
            self.bounded.add("steps")                # a loop that consumes no loader: N x E steps in all
            raise StopScript
        if self.t_epoch is None:
            self._start_training()

    @own_time
    def step_ends(self) -> None:
        """An optimizer step ended: the pending forward pass was training."""
        fwd = self.pending or Forward(0, True, True)
        self.pending = None
        self.training_modes = self.training_modes or (fwd.grad, fwd.training)
        self.seen["train_forwards"] += 1
        self.seen["eval_mode_in_train"] += not fwd.training
        self.sums["train"] += fwd.counts
        self.m.observed_batch_sizes.append(fwd.batch)
        if self.fetched_from is not None:
            self.training_loader, self.fetched_from = self.fetched_from.loader_id, None
        self.steps += 1
        self.in_phase += 1
        self.epoch_steps += 1
        self.epoch_samples += fwd.batch
        if self.t_measured is not None:
            self.timer.tick()
            self.m.measured_samples += fwd.batch
            self.m.data_wait_s += fwd.wait
            if self._own_mark is not None:
                self.own_s += HookClock.seconds - self._own_mark
        elif self.steps == self.spec.warmup_steps:
            self.sync()
            self.phases.end(WARMUP, self.epoch, self.in_phase, then=TRAIN)
            self.phase, self.in_phase = TRAIN, 0
            self._start_clock()
        # the probe's own time from this step's end to the next one's, while steps are measured
        self._own_mark = HookClock.seconds if self.t_measured is not None else None
        if self.steps % self.spec.measure.memory_every_steps == 0:
            self.m.memory_over_steps.append((self.steps, self.memory_now()))
        self.progress.emit(phase="train", epoch=self.epoch, epochs=self.spec.bounds.epochs, step=self.epoch_steps,
                           steps=self.spec.bounds.max_steps)
        self.t_step_end = now()

    @own_time
    def loader_pass(self, loader_id: int, batch_size: int | None, workers: int | None,
                    settings: dict[str, Any] | None = None) -> LoaderPass:
        """A pass over a loader begins; a new pass over the training loader, with no evaluation since its
        last training step, is a new epoch."""
        if self.phase != EVAL and self.epoch_steps and loader_id == self.training_loader:
            self._end_epoch()
        p = LoaderPass(self, loader_id, batch_size, workers, settings)
        self.loaders.append(p)
        return p

    def training_pass(self) -> LoaderPass | None:
        """The last pass over the loader the training steps took their batches from."""
        return next((p for p in reversed(self.loaders) if p.loader_id == self.training_loader), None)

    @own_time
    def fetched(self, seconds: float) -> None:
        """The script's loop waited this long for its next batch from a loader (where passes are not timed)."""
        if self.phase != EVAL and self.t_measured is not None:
            self.m.data_wait_s += seconds

    @own_time
    def epoch_ends(self) -> None:
        """The framework says an epoch ended (Keras fit's callback): its last evaluation pass is counted."""
        if self.pending is not None and self.phase == EVAL:
            self._evaluation(self.pending)
        if self.epoch_steps or self.phase == EVAL:
            self._end_epoch()

    @own_time
    def host_sync(self) -> None:
        """A call in the script's own code that waits for the device (.item(), .numpy(), float(), ...)."""
        self.syncs[EVAL if self.phase == EVAL else TRAIN] += 1

    # -- phases ---------------------------------------------------------------------------------------

    def _start_training(self) -> None:
        self.sync()
        self.t_epoch = now()
        if self.steps >= self.spec.warmup_steps:
            self._start_clock()

    def _start_clock(self) -> None:
        self.t_measured = now()
        self.timer.start()
        self.beside.start()
        self.energy.start()

    def _stop_clock(self) -> float:
        """Sync; the measured training time after warmup ends here."""
        self.sync()
        t = now()
        if self.t_measured is not None:
            self.m.measured_train_s += t - self.t_measured
            self.beside.stop()
            self.energy.stop()
            self.t_measured = None
        return t

    def _close_training(self) -> float:
        t = self._stop_clock()
        self.train_part = {"train_s": t - (self.t_epoch or t), "samples": self.epoch_samples, "steps": self.epoch_steps}
        return t

    def _to_eval(self) -> None:
        t = self._close_training()
        self.phases.end(self.phase, self.epoch, self.in_phase, then=EVAL)
        self.phase, self.in_phase, self.t_eval = EVAL, 0, t

    def _evaluation(self, fwd: Forward) -> None:
        if self.phase != EVAL:
            self._to_eval()
        self.seen["eval_forwards"] += 1
        self.seen["grad_enabled_in_eval"] += fwd.grad
        self.sums["eval"] += fwd.counts
        self.eval_steps += 1
        self.eval_samples += fwd.batch
        if fwd.batch not in self.m.eval_batch_sizes:
            self.m.eval_batch_sizes.append(fwd.batch)
        self.pending = None

    def _end_epoch(self) -> None:
        """Record the epoch that ends, its training and the evaluation after it (if one came)."""
        after = TRAIN if self.steps >= self.spec.warmup_steps else WARMUP
        if self.phase == EVAL:
            self.sync()
            assert self.t_eval is not None                 # set as the evaluation began
            eval_s = now() - self.t_eval
            self.phases.end(EVAL, self.epoch, self.eval_steps, then=after)
        else:
            self._close_training()
            eval_s = 0.0
            self.phases.end(self.phase, self.epoch, self.in_phase, then=after)
        part = self.train_part or {"train_s": 0.0, "samples": 0, "steps": 0}
        self.m.samples_per_epoch.append(part["samples"])
        self.m.steps_per_epoch.append(part["steps"])
        self.m.epoch_times.append({"train_s": part["train_s"], "eval_s": eval_s})
        self.m.test_samples, self.m.test_steps = self.eval_samples, self.eval_steps
        self.epoch_sums.append({**self.sums, "train_samples": part["samples"], "train_steps": part["steps"],
                                "test_samples": self.eval_samples, "test_steps": self.eval_steps})
        self.sums = {"train": [], "eval": []}
        self.progress.emit(force=True, phase="epoch", epoch=self.epoch, epochs=self.spec.bounds.epochs)
        self.phase, self.epoch = after, self.epoch + 1
        self.in_phase = self.epoch_steps = self.epoch_samples = self.eval_steps = self.eval_samples = 0
        self.train_part, self.t_epoch = None, None

    def finish(self, as_float: Callable[[Any], float], stopped: bool) -> None:
        """The script ended, or the probe ``stopped`` it at the step of a forward pass that never finished; a
        last forward pass without a step after it was evaluation. Close the open epoch and read the probe's
        own counts (``as_float`` turns a device value into a number)."""
        if self.pending is not None and self.steps and not stopped:
            self._evaluation(self.pending)
        if self.epoch_steps or self.phase == EVAL:
            self._end_epoch()
        self.m.step_s = self.timer.report()
        self.m.co_load = self.beside.report()
        self.m.energy = self.energy.report(self.m.measured_samples)
        for i, sums in enumerate(self.epoch_sums, 1):
            counted: dict[str, Any] = {"epoch": i}
            figures: dict[str, Any] = {"epoch": i}
            for split, key in (("train", "train"), ("test", "eval")):
                # where the script computed no loss (an evaluation that only takes argmax), nothing was counted
                seen = bool(sums[key]) and sums[f"{split}_samples"] > 0
                loss = sum(as_float(loss) for loss, _ in sums[key]) if seen else None
                correct = sum(as_float(c) for _, c in sums[key]) if seen else None
                samples = sums[f"{split}_samples"]
                counted.update({f"{split}_correct": correct, f"{split}_samples": samples,
                                f"{split}_steps": sums[f"{split}_steps"]})
                figures[f"{split}_loss"] = loss / samples if seen else None
                figures[f"{split}_accuracy"] = correct / samples if seen else None
            self.m.counted.append(counted)
            self.m.epoch_metrics.append(figures)

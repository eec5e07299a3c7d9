"""What the probe sees of a user's own script while it trains, whatever the framework.

Each framework's probe (reprokit/kits/pytorch_kit/probe.py, reprokit/kits/tensorflow_kit/probe.py) calls an ``Observer``
from the framework's own hooks: a forward pass of the trained model (its batch size, grad and module
mode), the start and end of each optimizer step, the loss's inputs, a host synchronisation in the
script's own code, a pass over a loader starting. From those alone it knows the phases: a forward
pass followed by an optimizer step is training; a forward pass with no step after it, or in other
modes than training's, is evaluation. A run of training steps is an epoch's training, the evaluation
after it the epoch's evaluation, and a new pass over the training loader a new epoch. It takes the
same readings as a kit run, into the same ``Measurements``: steps timed in synchronised windows after
the warmup steps, memory by phase, data wait, the batches the model received, and its own count of
the loss and the correct predictions from the loss's inputs.

It also bounds the run (the spec's ``bounds``, reprokit/kits/observation/bounds.py): each pass over a loader is bounded
where the script's loop takes its batches, so that after the last epoch the script goes on to what it does
after training; the evaluation it does there (on the trained model, or a reloaded instance of its class)
is the last epoch's. A loop without a loader is stopped after N x E steps (``StopScript``).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reprokit.kits.contract.spec import ScriptSpec
from reprokit.kits.framework_free.measure import WindowTimer, now
from reprokit.kits.measurement.co_load import CoLoad
from reprokit.kits.measurement.energy import Energy
from reprokit.kits.measurement.hook_clock import HookClock, own_time, unclocked
from reprokit.kits.measurement.phases import EVAL, TRAIN, WARMUP, PhaseMemory
from reprokit.kits.observation.bounds import Bounded, LoaderPass, StopScript
from reprokit.kits.training_loop.progress import Progress
from reprokit.kits.training_loop.training import Measurements

# the probe's parts import these from here (their homes: reprokit/kits/observation/bounds.py,
# reprokit/kits/measurement/hook_clock.py)
__all__ = ["Bounded", "Forward", "HookClock", "LoaderPass", "Observer", "StopScript", "own_time", "unclocked"]


@dataclass
class Forward:
    batch: int
    grad: bool
    training: bool                     # the module's mode (PyTorch), or the call's training argument (Keras)
    wait: float = 0.0                  # seconds since the last step ended (the time it waited for this batch)
    # the loss's (summed loss, correct) for this batch, on the device
    counts: list[tuple[Any, Any]] = field(default_factory=list)
    # where the script computed no loss: the probe's own count of its outputs against the batch's labels
    own: tuple[Any, Any] | None = None
    source: LoaderPass | None = None   # the pass its batch came from


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
        self.sums: list[tuple[Any, Any]] = []          # the epoch's training counts
        # the epoch's evaluation by loader (None: batches from no loader), each its last pass's: a pass that
        # repeats one (a reloaded model tested again) replaces it
        self.evals: dict[int | None, dict[str, Any]] = {}
        self.epoch_sums: list[dict[str, Any]] = []     # an epoch's sums (lists) and counts (ints)
        self.seen: dict[str, Any] = {"train_forwards": 0, "eval_forwards": 0, "eval_mode_in_train": 0,
                                     "grad_enabled_in_eval": 0, "loss_input_probe": None}
        self.syncs: Counter[str] = Counter()         # host synchronisations in the script's code, by phase
        self.loaders: list[LoaderPass] = []
        self.fetched_from: LoaderPass | None = None     # the pass the last batch came from, since the last step
        self.training_loader: int | None = None         # the loader the training steps' batches come from
        self.bounded: set[str] = set()
        self.stopped = False                            # the probe's StopScript ended the script
        self.trained_out = False                        # a pass over the training loader came after the last epoch
        self.repeats: set[int] = set()                  # then: the loaders the last epoch evaluated
        self.skipped: set[int] = set()                  # those whose pass ended since the last training pass
        self.t_step_end: float | None = None
        self.t_epoch: float | None = None
        self.t_eval: float | None = None
        self.t_measured: float | None = None
        self.epoch_samples = self.epoch_steps = self.eval_steps = 0
        self.train_part: dict[str, Any] | None = None  # the epoch's training, once it ended
        self.own_s = 0.0                             # the probe's own time over the measured steps (HookClock)
        self._own_mark: float | None = None
        self.at_first_step: list[Callable[[], object]] = []     # called once the model is known, its device too
        self.after_first_step: list[Callable[[], object]] = []  # called once the first step has updated the model

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
        self.pending = Forward(batch, grad, training, source=self.fetched_from)
        if self.fetched_from is not None:
            self.fetched_from.used += 1
        if timed and self.phase != EVAL and self.t_measured is not None and self.t_step_end is not None:
            self.pending.wait = t - self.t_step_end

    @own_time
    def loss(self, loss_sum: Any, correct: Any) -> None:
        """The loss of the pending forward pass, counted by the probe (device values, read once at the end)."""
        if self.pending is not None:
            self.pending.counts.append((loss_sum, correct))

    @own_time
    def outputs_counted(self, loss_sum: Any, correct: Any) -> None:
        """The probe's own count of the pending forward pass's outputs against its batch's labels (used where the
        script computed no loss of them: an evaluation that only takes the argmax)."""
        if self.pending is not None:
            self.pending.own = (loss_sum, correct)

    def labels(self) -> Any:
        """The labels of the batch the script's loop fetched last, where it has them."""
        return self.fetched_from.labels if self.fetched_from is not None else None

    @own_time
    def step_begins(self) -> None:
        """An optimizer step begins: an evaluation before it has ended its epoch; past the bounds, stop (where a
        loader's pass could not end the loop)."""
        if not self.steps:
            for call in self.at_first_step:
                call()
        bounds = self.spec.bounds
        if self.phase == EVAL and not self.trained_out:
            self._end_epoch()
        if bounds.epochs and (self.trained_out or self.epoch > bounds.epochs):
            self._stop("epochs")
        if (bounds.epochs and bounds.max_steps and self.training_loader is None
                and self.steps >= bounds.epochs * bounds.max_steps):
            self._stop("steps")                      # a loop that consumes no loader: N x E steps in all
        if self.t_epoch is None:
            self._start_training()
        elif self.train_part is not None:            # its training pass ran out, and training goes on in the epoch
            self.train_part = None
            if self.steps >= self.spec.warmup_steps:
                self._start_clock()

    def _stop(self, bound: str) -> None:
        self.bounded.add(bound)
        self.stopped = True
        raise StopScript

    @own_time
    def step_ends(self) -> None:
        """An optimizer step ended: the pending forward pass was training."""
        fwd = self.pending or Forward(0, True, True)
        self.pending = None
        self.training_modes = self.training_modes or (fwd.grad, fwd.training)
        self.seen["train_forwards"] += 1
        self.seen["eval_mode_in_train"] += not fwd.training
        self.sums += fwd.counts
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
        if self.progress.due():
            self.progress.emit(phase="train", epoch=self.epoch, epochs=self.spec.bounds.epochs,
                               step=self.epoch_steps, steps=self.spec.bounds.max_steps)
        self.t_step_end = now()
        if self.steps == 1:
            for call in self.after_first_step:
                call()

    @own_time
    def loader_pass(self, loader_id: int, batch_size: int | None, workers: int | None,
                    settings: dict[str, Any] | None = None, evaluating: bool = False) -> LoaderPass:
        """A pass over a loader begins (``evaluating``: the framework says the script evaluates in it, e.g. with
        gradients off). A new pass over the training loader, with no evaluation since its last training step,
        is a new epoch; past the last epoch it ends at once, and so does, after each such pass, the first pass
        over each loader the last epoch evaluated (that epoch's evaluation of the same weights); a second one
        runs (what the script does after its epochs: a test of the model it saved)."""
        training = loader_id == self.training_loader and not evaluating
        epochs = self.spec.bounds.epochs
        if training and epochs and not self.trained_out and self.epoch >= epochs and self.epoch_steps:
            self.training_stops()
            self.trained_out = True
            self.repeats = {p.loader_id for p in self.loaders if p.steps0 == self.steps and p.fetched
                            and p.loader_id != loader_id}
        ends = None
        if self.trained_out and training:
            ends, self.skipped = "epochs", set()
        elif self.trained_out and loader_id in self.repeats - self.skipped:
            ends = "epochs"
            self.skipped.add(loader_id)
        if not ends and training and self.phase != EVAL and self.epoch_steps:
            self._end_epoch()
        p = LoaderPass(self, loader_id, batch_size, workers, settings, evaluating, ends)
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

    def training_stops(self) -> None:
        """The pass the training steps took their batches from ran out: the training clock stops here (what the
        script does next, a checkpoint, a new loader's workers, is not training)."""
        if self.phase != EVAL and self.epoch_steps:
            self._close_training()

    def training_idle(self) -> bool:
        """Whether training has run and none is under way (its pass ran out, or the script evaluates)."""
        return bool(self.steps) and (self.trained_out or self.phase == EVAL or self.train_part is not None)

    def training_over(self) -> bool:
        """Whether the bounded training is over: idle in or past the last epoch (unbounded, the probe cannot know
        that the script trains no more)."""
        epochs = self.spec.bounds.epochs
        return self.training_idle() and bool(epochs) and (self.trained_out or self.epoch >= (epochs or 0))

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
        """The epoch's training ends (once: where its pass ran out, or at its evaluation)."""
        if self.train_part is None:
            t = self._stop_clock()
            self.train_part = {"train_s": t - (self.t_epoch or t), "samples": self.epoch_samples,
                               "steps": self.epoch_steps, "ended": t}
        return float(self.train_part["ended"])

    def _again(self) -> bool:
        """No training step since the last epoch ended: what comes now is that epoch's (see _end_epoch)."""
        return not (self.train_part or {}).get("steps") and not self.epoch_steps and bool(self.m.steps_per_epoch)

    def _to_eval(self) -> None:
        closed = self.train_part is not None
        label = self.epoch - self._again()
        t = self._close_training()
        self.phases.end(self.phase, label, self.in_phase, then=EVAL)
        self.phase, self.in_phase, self.t_eval = EVAL, 0, now() if closed else t

    def _evaluation(self, fwd: Forward) -> None:
        if self.phase != EVAL:
            self._to_eval()
        self.seen["eval_forwards"] += 1
        self.seen["grad_enabled_in_eval"] += fwd.grad
        counts = fwd.counts or ([fwd.own] if fwd.own is not None else [])
        key = fwd.source.loader_id if fwd.source is not None else None
        split = self.evals.get(key)
        if split is None or split["pass"] is not fwd.source:
            split = self.evals[key] = {"pass": fwd.source, "sums": [], "samples": 0, "counted": 0, "steps": 0}
        split["sums"] += counts
        split["samples"] += fwd.batch
        split["counted"] += fwd.batch if counts else 0
        split["steps"] += 1
        self.eval_steps += 1
        if fwd.batch not in self.m.eval_batch_sizes:
            self.m.eval_batch_sizes.append(fwd.batch)
        self.pending = None

    def _end_epoch(self) -> None:
        """Record the epoch that ends, its training and the evaluation after it (if one came). An evaluation
        with no training step since the last epoch ended (Keras's evaluate after a fit that validated) is no
        epoch: it is the last epoch's, its time added and its test figures the last ones of those weights."""
        after = TRAIN if self.steps >= self.spec.warmup_steps else WARMUP
        part = self.train_part or {"train_s": 0.0, "samples": 0, "steps": 0}
        again = self._again()
        epoch = self.epoch - again
        if self.phase == EVAL:
            self.sync()
            assert self.t_eval is not None                 # set as the evaluation began
            eval_s = now() - self.t_eval
            self.phases.end(EVAL, epoch, self.eval_steps, then=after)
        else:
            self._close_training()
            part = self.train_part or part
            eval_s = 0.0
            self.phases.end(self.phase, epoch, self.in_phase, then=after)
        evals = self.evals.values()
        self.m.test_samples, self.m.test_steps = sum(e["samples"] for e in evals), sum(e["steps"] for e in evals)
        tested = {"eval": [c for e in evals for c in e["sums"]], "test_samples": sum(e["counted"] for e in evals),
                  "test_steps": self.m.test_steps}
        trained, self.sums, self.evals = self.sums, [], {}
        if again:
            self.m.epoch_times[-1]["eval_s"] += eval_s
            self.epoch_sums[-1].update(tested)
            self.phase, self.in_phase, self.eval_steps, self.train_part, self.t_epoch = after, 0, 0, None, None
            return
        self.m.samples_per_epoch.append(part["samples"])
        self.m.steps_per_epoch.append(part["steps"])
        self.m.epoch_times.append({"train_s": part["train_s"], "eval_s": eval_s})
        self.epoch_sums.append({"train": trained, **tested, "train_samples": part["samples"],
                                "train_steps": part["steps"]})
        self.progress.emit(force=True, phase="epoch", epoch=self.epoch, epochs=self.spec.bounds.epochs)
        self.phase, self.epoch = after, self.epoch + 1
        self.in_phase = self.epoch_steps = self.epoch_samples = self.eval_steps = 0
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

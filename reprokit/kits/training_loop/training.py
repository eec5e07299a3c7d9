"""The training loop both frameworks run: same batches, same clocks, same bookkeeping.

Besides the figures the run reports (its metrics hook's, the posted bookkeeping's, or else the
kit's), the loop keeps the kit's own count of correct predictions and samples, taken by the
backend from the outputs it observed; the detectors hold the one against the other. Memory is
read by phase (reprokit/kits/measurement/phases.py): counters reset when the warmup steps end and at each
training and evaluation phase's start, read at its end.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free.measure import NoStepTimer, now
from reprokit.kits.measurement.co_load import CoLoad
from reprokit.kits.measurement.energy import Energy
from reprokit.kits.measurement.phases import EVAL, TRAIN, WARMUP, PhaseMemory
from reprokit.kits.training_loop.backend import Backend
from reprokit.kits.training_loop.progress import Progress


@dataclass
class Measurements:
    observed_batch_sizes: list[int] = field(default_factory=list)     # every training step's, from the tensors
    samples_per_epoch: list[int] = field(default_factory=list)
    steps_per_epoch: list[int] = field(default_factory=list)
    epoch_times: list[dict[str, Any]] = field(default_factory=list)
    epoch_metrics: list[dict[str, Any]] = field(default_factory=list)   # the figures the run reported
    counted: list[dict[str, Any]] = field(default_factory=list)         # the kit's own count, per epoch and split
    averaged_over: str = "samples"     # what the reported figures were divided by, judged from the count
    memory_over_steps: list[tuple[int, int]] = field(default_factory=list)
    data_wait_s: float = 0.0
    measured_train_s: float = 0.0      # training time after warmup, synchronised at its edges
    measured_samples: int = 0          # samples trained after warmup
    test_samples: int = 0
    test_steps: int = 0
    step_s: list[float] = field(default_factory=list)
    warmed_eval_sizes: list[int] = field(default_factory=list)   # the evaluation batch sizes the warmup ran
    eval_batch_sizes: list[int] = field(default_factory=list)    # every size the evaluation passes gave
    window_steps: int = 1
    step_timing: str = ""              # how step times were taken
    co_load: dict[str, Any] = field(default_factory=dict)       # what else kept the CPUs busy while timed
    energy: dict[str, Any] = field(default_factory=dict)        # joules over the timed window, or why not
    warmup_s: float | None = None      # from the first warmed shape to the timed window: compilation included


def steps_per_epoch(spec: RunSpec, n_train: int) -> int:
    """What the loop asks for each epoch: whole batches of the configured size, like Keras's
    ``steps_per_epoch = len(train) // batch_size``; the data may run out sooner."""
    batch, cap = spec.train.batch_size, spec.train.max_steps_per_epoch
    steps = n_train // batch if spec.data.drop_last else -(-n_train // batch)
    return min(steps, cap) if cap else steps


def train(backend: Backend, spec: RunSpec, n_train: int, progress: Progress, phases: PhaseMemory,
          energy: Energy) -> Measurements:
    warmup = spec.train.warmup_steps
    memory_every = spec.measure.memory_every_steps
    epochs = spec.train.epochs
    m = Measurements(window_steps=spec.measure.window_steps)
    timer = backend.step_timer(m.window_steps) if spec.measure.step_timing else NoStepTimer()
    beside = CoLoad()
    m.step_timing = timer.method
    planned = steps_per_epoch(spec, n_train)

    global_step = 0
    phases.start(WARMUP)               # the build and the FLOP count are behind us
    t_warm = now()
    m.warmed_eval_sizes = warm_shapes(backend)
    for epoch in range(1, epochs + 1):
        backend.set_mode(training=True)
        batches = backend.train_batches(epoch)
        samples = steps = in_phase = 0
        backend.sync()
        t_epoch = now()
        t_measured = t_epoch if global_step >= warmup else None
        if t_measured is not None:
            if m.warmup_s is None:
                m.warmup_s = t_measured - t_warm
            timer.start()
            beside.start()
            energy.start()
        while steps < planned:
            t_fetch = now()
            batch = next(batches, None)
            if batch is None:
                break       # a non-repeating dataset ran out
            if t_measured is not None:
                m.data_wait_s += now() - t_fetch
            n = backend.batch_size_of(batch)
            backend.train_step(batch)
            m.observed_batch_sizes.append(n)
            samples += n
            steps += 1
            in_phase += 1
            global_step += 1
            if t_measured is not None:
                timer.tick()
                m.measured_samples += n
            elif global_step == warmup:
                backend.sync()
                # Autotuning and one-off workspaces belong to the warmup's peak, not to training's.
                phases.end(WARMUP, epoch, in_phase, then=TRAIN)
                in_phase = 0
                t_measured = now()
                m.warmup_s = t_measured - t_warm
                timer.start()
                beside.start()
                energy.start()
            if global_step % memory_every == 0:
                m.memory_over_steps.append((global_step, backend.memory_now()))
            progress.emit(phase="train", epoch=epoch, epochs=epochs, step=steps, steps=planned)
        backend.sync()
        t_end = now()
        if t_measured is not None:
            timer.stop()
            beside.stop()
            energy.stop()
            m.measured_train_s += t_end - t_measured
        if in_phase:
            phases.end(TRAIN if t_measured is not None else WARMUP, epoch, in_phase, then=EVAL)
        else:
            phases.start(EVAL)
        train_loss, train_correct = backend.take_sums()
        train_reported = backend.reported()

        test = _evaluate(backend, m.eval_batch_sizes)
        phases.end(EVAL, epoch, test.steps, then=TRAIN if global_step >= warmup else WARMUP)
        train_part = _Split(samples, steps, train_loss, train_correct, t_end - t_epoch, train_reported)
        _record_epoch(m, epoch, train_part, test)
        backend.end_epoch(train_loss)
        progress.emit(force=True, phase="epoch", epoch=epoch, epochs=epochs,
                      test_accuracy=m.epoch_metrics[-1]["test_accuracy"])
    m.step_s = timer.report()
    m.co_load = beside.report()
    m.energy = energy.report(m.measured_samples)
    m.averaged_over = averaged_over(m.epoch_metrics, m.counted)
    return m


def warm_shapes(backend: Backend) -> list[int]:
    """One evaluation step of each batch size the evaluation pass will give, in the warmup phase: cuDNN's
    and TensorFlow's autotuners and tf.function's tracing first meet a shape there, so their time and
    workspaces land in the warmup, not in an evaluation phase (its last batch is often partial: 10,000
    images in batches of 32 end in 16). Evaluation mode, no gradients: nothing the run trains changes.
    Returns the sizes warmed."""
    backend.set_mode(training=False)
    sizes = []
    for batch in backend.warm_test_batches():
        sizes.append(backend.batch_size_of(batch))
        backend.eval_step(batch)
    backend.take_sums()
    backend.forget_outputs()
    return sizes


@dataclass
class _Split:
    """What one pass over a split gave: its counts, the kit's own sums, its seconds and the run's own metrics."""
    samples: int
    steps: int
    loss_sum: float
    correct: float
    seconds: float
    reported: dict[str, Any] | None


def _evaluate(backend: Backend, sizes_seen: list[int]) -> _Split:
    backend.set_mode(training=False)
    t_eval = now()
    n = steps = 0
    for batch in backend.test_batches():
        size = backend.batch_size_of(batch)
        n += size
        backend.eval_step(batch)
        steps += 1
        if size not in sizes_seen:
            sizes_seen.append(size)
    loss_sum, correct = backend.take_sums()
    seconds = now() - t_eval
    return _Split(n, steps, loss_sum, correct, seconds, backend.reported())


def _record_epoch(m: Measurements, epoch: int, train: _Split, test: _Split) -> None:
    m.samples_per_epoch.append(train.samples)
    m.steps_per_epoch.append(train.steps)
    m.test_samples, m.test_steps = test.samples, test.steps
    m.counted.append({"epoch": epoch, "train_correct": train.correct, "train_samples": train.samples,
                      "train_steps": train.steps, "test_correct": test.correct, "test_samples": test.samples,
                      "test_steps": test.steps})
    m.epoch_times.append({"train_s": train.seconds, "eval_s": test.seconds})
    m.epoch_metrics.append({"epoch": epoch, **_figures("train", train.reported, train.loss_sum, train.correct,
                                                      train.samples),
                            **_figures("test", test.reported, test.loss_sum, test.correct, test.samples)})


def _figures(split: str, reported: dict[str, Any] | None, loss_sum: float, correct: float,
             samples: int) -> dict[str, Any]:
    """The split's reported loss and accuracy: the run's own (its metrics hook's), else the kit's per sample."""
    if reported is not None:
        return {f"{split}_loss": reported["loss"], f"{split}_accuracy": reported["accuracy"]}
    return {f"{split}_loss": loss_sum / samples if samples else None,
            f"{split}_accuracy": correct / samples if samples else None}


def averaged_over(reported: list[dict[str, Any]], counted: list[dict[str, Any]]) -> str:
    """What the reported accuracies were divided by: samples or batches, judged from the kit's own count
    (correct predictions, samples and steps); "unknown" where they match neither."""
    kinds = set()
    for rep, seen in zip(reported, counted):
        for split in ("train", "test"):
            acc, correct = rep[f"{split}_accuracy"], seen[f"{split}_correct"]
            if acc is None:
                continue
            samples, steps = seen[f"{split}_samples"], seen[f"{split}_steps"]
            if abs(acc * samples - correct) <= 1e-6 * max(1.0, correct):
                kinds.add("samples")
            elif abs(acc * steps - correct) <= 1e-6 * max(1.0, correct):
                kinds.add("batches")
            else:
                kinds.add("unknown")
    return kinds.pop() if len(kinds) == 1 else ("samples" if not kinds else "unknown")

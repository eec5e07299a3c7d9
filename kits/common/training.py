"""The training loop both frameworks run: same batches, same clocks, same bookkeeping."""
from __future__ import annotations

from dataclasses import dataclass, field

from kits.common.backend import Backend
from kits.common.measure import NoStepTimer, now
from kits.common.progress import Progress
from kits.common.spec import RunSpec


@dataclass
class Measurements:
    observed_batch_sizes: list[int] = field(default_factory=list)
    samples_per_epoch: list[int] = field(default_factory=list)
    steps_per_epoch: list[int] = field(default_factory=list)
    epoch_times: list[dict] = field(default_factory=list)
    epoch_metrics: list[dict] = field(default_factory=list)
    epoch_sums: list[dict] = field(default_factory=list)      # the raw sums behind epoch_metrics
    memory_over_steps: list[tuple[int, int]] = field(default_factory=list)
    train_memory_peak: int = 0        # max of the sampled current memory while training
    eval_memory_peak: int = 0         # ... and while evaluating
    data_wait_s: float = 0.0
    measured_train_s: float = 0.0      # training time after warmup, synchronised at its edges
    measured_samples: int = 0          # samples trained after warmup
    test_samples: int = 0
    test_steps: int = 0
    step_s: list[float] = field(default_factory=list)
    window_steps: int = 1
    step_timing: str = ""              # how step times were taken


def steps_per_epoch(spec: RunSpec, n_train: int) -> int:
    """What the loop asks for each epoch: whole batches of the configured size, like Keras's
    ``steps_per_epoch = len(train) // batch_size``; the data may run out sooner."""
    batch, cap = spec.train.batch_size, spec.train.max_steps_per_epoch
    steps = n_train // batch if spec.data.drop_last else -(-n_train // batch)
    return min(steps, cap) if cap else steps


def train(backend: Backend, spec: RunSpec, n_train: int, progress: Progress) -> Measurements:
    warmup = spec.train.warmup_steps
    memory_every = spec.measure.memory_every_steps
    epochs = spec.train.epochs
    m = Measurements(window_steps=spec.measure.window_steps)
    timer = backend.step_timer(m.window_steps) if spec.measure.step_timing else NoStepTimer()
    m.step_timing = timer.method
    planned = steps_per_epoch(spec, n_train)

    global_step = 0
    for epoch in range(1, epochs + 1):
        backend.set_mode(training=True)
        batches = backend.train_batches(epoch)
        samples = steps = 0
        backend.sync()
        t_epoch = now()
        t_measured = t_epoch if global_step >= warmup else None
        if t_measured is not None:
            timer.start()
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
            global_step += 1
            if t_measured is not None:
                timer.tick()
                m.measured_samples += n
            elif global_step == warmup:
                backend.sync()
                t_measured = now()
                timer.start()
            if global_step % memory_every == 0:
                current = backend.memory_now()
                m.memory_over_steps.append((global_step, current))
                m.train_memory_peak = max(m.train_memory_peak, current)
            progress.emit(phase="train", epoch=epoch, epochs=epochs, step=steps, steps=planned)
        backend.sync()
        t_end = now()
        if t_measured is not None:
            m.measured_train_s += t_end - t_measured
        train_loss, train_correct = backend.take_sums()

        backend.set_mode(training=False)
        t_eval = now()
        test_n = eval_steps = 0
        for batch in backend.test_batches():
            test_n += backend.batch_size_of(batch)
            backend.eval_step(batch)
            eval_steps += 1
            m.eval_memory_peak = max(m.eval_memory_peak, backend.memory_now())
        test_loss, test_correct = backend.take_sums()
        t_eval_end = now()

        # Averaged over samples, unless the run reproduces code that divides by the number of batches.
        per_batch = backend.averaged_over == "batches"
        train_div, test_div = (steps, eval_steps) if per_batch else (samples, test_n)
        m.samples_per_epoch.append(samples)
        m.steps_per_epoch.append(steps)
        m.test_samples, m.test_steps = test_n, eval_steps
        m.epoch_sums.append({"train_correct": train_correct, "train_samples": samples})
        m.epoch_times.append({"train_s": t_end - t_epoch, "eval_s": t_eval_end - t_eval})
        m.epoch_metrics.append({
            "epoch": epoch,
            "train_loss": train_loss / train_div if train_div else None,
            "train_accuracy": train_correct / train_div if train_div else None,
            "test_loss": test_loss / test_div if test_div else None,
            "test_accuracy": test_correct / test_div if test_div else None,
        })
        backend.end_epoch(train_loss)
        progress.emit(force=True, phase="epoch", epoch=epoch, epochs=epochs,
                      test_accuracy=m.epoch_metrics[-1]["test_accuracy"])
    m.step_s = timer.per_step()
    return m

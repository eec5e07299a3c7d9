"""The training loop both frameworks run: same batches, same clocks, same bookkeeping."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kits.common import data as datalib
from kits.common.backend import Backend
from kits.common.measure import WindowTimer, now
from kits.common.progress import Progress


@dataclass
class Measurements:
    observed_batch_sizes: list[int] = field(default_factory=list)
    samples_per_epoch: list[int] = field(default_factory=list)
    steps_per_epoch: list[int] = field(default_factory=list)
    epoch_times: list[dict] = field(default_factory=list)
    epoch_metrics: list[dict] = field(default_factory=list)
    memory_over_steps: list[tuple[int, int]] = field(default_factory=list)
    data_wait_s: float = 0.0
    measured_train_s: float = 0.0      # training time after warmup, synchronised at its edges
    measured_samples: int = 0          # samples trained after warmup
    test_samples: int = 0
    step_s: list[float] = field(default_factory=list)
    window_steps: int = 1


def train(backend: Backend, spec: dict, arrays: datalib.Arrays, progress: Progress) -> Measurements:
    train_cfg, data_cfg = spec["train"], spec["data"]
    batch_size = train_cfg["batch_size"]
    warmup = train_cfg["warmup_steps"]
    max_steps = train_cfg.get("max_steps_per_epoch")
    memory_every = spec["measure"]["memory_every_steps"]
    m = Measurements(window_steps=spec["measure"]["window_steps"])
    timer = WindowTimer(m.window_steps, backend.sync)
    epochs = train_cfg["epochs"]
    n_train = len(arrays.x_train)
    steps_planned = n_train // batch_size if data_cfg["drop_last"] else -(-n_train // batch_size)
    if max_steps:
        steps_planned = min(steps_planned, max_steps)

    global_step = 0
    for epoch in range(1, epochs + 1):
        backend.set_mode(training=True)
        order = datalib.epoch_order(n_train, train_cfg["seed"], epoch, data_cfg["shuffle"])
        samples = steps = 0
        backend.sync()
        t_epoch = now()
        t_measured = t_epoch if global_step >= warmup else None
        if t_measured is not None:
            timer.start()
        for idx in datalib.batches(order, batch_size, data_cfg["drop_last"]):
            if max_steps and steps >= max_steps:
                break
            t_fetch = now()
            batch = backend.to_device(arrays.x_train[idx], arrays.y_train[idx])
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
                m.memory_over_steps.append((global_step, backend.memory_now()))
            progress.emit(phase="train", epoch=epoch, epochs=epochs, step=steps, steps=steps_planned)
        backend.sync()
        t_end = now()
        if t_measured is not None:
            m.measured_train_s += t_end - t_measured
        train_loss, train_correct = backend.take_sums()

        backend.set_mode(training=False)
        t_eval = now()
        test_n = 0
        for idx in datalib.batches(np.arange(len(arrays.x_test)), train_cfg["eval_batch_size"], drop_last=False):
            batch = backend.to_device(arrays.x_test[idx], arrays.y_test[idx])
            test_n += backend.batch_size_of(batch)
            backend.eval_step(batch)
        test_loss, test_correct = backend.take_sums()
        t_eval_end = now()

        m.samples_per_epoch.append(samples)
        m.steps_per_epoch.append(steps)
        m.test_samples = test_n
        m.epoch_times.append({"train_s": t_end - t_epoch, "eval_s": t_eval_end - t_eval})
        m.epoch_metrics.append({
            "epoch": epoch,
            "train_loss": train_loss / samples if samples else None,
            "train_accuracy": train_correct / samples if samples else None,
            "test_loss": test_loss / test_n if test_n else None,
            "test_accuracy": test_correct / test_n if test_n else None,
        })
        progress.emit(force=True, phase="epoch", epoch=epoch, epochs=epochs,
                      test_accuracy=m.epoch_metrics[-1]["test_accuracy"])
    m.step_s = timer.per_step
    return m

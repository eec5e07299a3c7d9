"""A Keras tutorial-style script that times its own steps: `model.fit` on numpy arrays with Keras's default
batch, as the beginner tutorials call it, timed by a callback of its own. benchmarks/bench_probe.py runs it
plain and under the probe."""
import json
import os
import time

import keras
import numpy as np

steps, warmup, batch = int(os.environ.get("BENCH_STEPS", "60")), 5, 32      # 32: fit's default batch
rng = np.random.default_rng(0)
x = rng.random(((steps + warmup) * batch, 32, 32, 3), dtype=np.float32)
y = rng.integers(0, 10, (steps + warmup) * batch)


class StepClock(keras.callbacks.Callback):
    """Each timed batch's start and the end of the last; the process's CPU time (all its threads) at both ends."""

    def __init__(self):
        super().__init__()
        self.starts, self.cpu = [], []

    def on_train_batch_begin(self, batch, logs=None):
        if batch == warmup:
            self.cpu.append(time.process_time())
        if batch >= warmup:
            self.starts.append(time.perf_counter())

    def on_train_end(self, logs=None):
        self.starts.append(time.perf_counter())
        self.cpu.append(time.process_time())


model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
                          keras.layers.Conv2D(32, 3, padding="same", activation="relu"), keras.layers.MaxPooling2D(),
                          keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dropout(0.1), keras.layers.Dense(10)])
model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
clock = StepClock()
model.fit(x, y, epochs=1, verbose=0, callbacks=[clock])
model.evaluate(x[:2 * batch], y[:2 * batch], verbose=0)
print("BENCH " + json.dumps({"steps": steps, "starts": clock.starts, "cpu": clock.cpu}), flush=True)

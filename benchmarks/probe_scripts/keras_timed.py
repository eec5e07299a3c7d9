"""A Keras training script that times its own steps, its step in a tf.function (the idiomatic fast path):
benchmarks/bench_probe.py runs it plain and under the probe, every observation on."""
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf

steps, warmup, batch = int(os.environ.get("BENCH_STEPS", "60")), 5, 64
rng = np.random.default_rng(0)
data = tf.data.Dataset.from_tensor_slices((rng.random(((steps + warmup) * batch, 32, 32, 3), dtype=np.float32),
                                           rng.integers(0, 10, (steps + warmup) * batch))).batch(batch)
model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(16, 3, padding="same"),
                          keras.layers.BatchNormalization(), keras.layers.ReLU(),
                          keras.layers.Conv2D(32, 3, padding="same"), keras.layers.BatchNormalization(),
                          keras.layers.ReLU(), keras.layers.MaxPooling2D(),
                          keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dropout(0.1), keras.layers.Dense(10)])
optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


starts = []                  # each timed step's start, by the script's own clock
for i, (x, y) in enumerate(data):
    if i == warmup:
        float(loss)
        cpu = [time.process_time()]           # the process's CPU time (all its threads) at both ends only
    if i >= warmup:
        starts.append(time.perf_counter())
    loss = train_step(x, y)
float(loss)
starts.append(time.perf_counter())
cpu.append(time.process_time())
for x, y in data.take(2):
    loss_fn(y, model(x, training=False))
print("BENCH " + json.dumps({"steps": steps, "starts": starts, "cpu": cpu}), flush=True)

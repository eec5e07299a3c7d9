"""A keras.Model with its own train_step and test_step (as tests/corpus/trainers/train_step_keras.py), whose
steps also return what they received: each batch's size, a fingerprint of its samples in their order (each
one's first pixel, weighted by its place) and its own loss (not Keras's mean so far). A callback writes them
down per step, for tests/test_trainers.py, which runs this under the probe unbounded and bounded: fit on a
shuffled tf.data dataset for 2 epochs with validation_data, then evaluate. Records: [what, epoch, batch size,
fingerprint, loss]; the file is the script's first argument."""
import json
import sys

import keras
import tensorflow as tf

keras.utils.set_random_seed(0)
tf.config.experimental.enable_op_determinism()


def seen(x, loss):
    n = tf.shape(x)[0]
    first = tf.round(tf.reshape(x, (n, -1))[:, 0] * 255)
    place = tf.cast(tf.range(n) + 1, x.dtype)
    return {"loss": loss, "n": n, "fingerprint": tf.reduce_sum(first * place)}


class CustomModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(y=y, y_pred=self(x, training=True))
        self.optimizer.apply(tape.gradient(loss, self.trainable_variables), self.trainable_variables)
        return seen(x, loss)

    def test_step(self, data):
        x, y = data
        return seen(x, self.compute_loss(y=y, y_pred=self(x, training=False)))


class Record(keras.callbacks.Callback):
    def __init__(self, tested):
        super().__init__()
        self.tested, self.epoch = tested, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def _record(self, what, logs):
        records.append([what, self.epoch, int(logs["n"]), float(logs["fingerprint"]), float(logs["loss"])])

    def on_train_batch_end(self, batch, logs=None):
        self._record("fit", logs)

    def on_test_batch_end(self, batch, logs=None):
        self._record(self.tested, logs)


(x_train, y_train), (x_test, y_test) = keras.datasets.mnist.load_data()
x_train, x_test = x_train[..., None] / 255.0, x_test[..., None] / 255.0
inputs = keras.Input((28, 28, 1))
x = keras.layers.Conv2D(4, 3, activation="relu")(keras.layers.Dropout(0.1)(inputs))
outputs = keras.layers.Dense(10)(keras.layers.GlobalAveragePooling2D()(x))
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
records = []
train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(400).batch(32)
model.fit(train_ds, epochs=2, validation_data=(x_test, y_test), verbose=0,
          callbacks=[Record("validation")])
model.evaluate(x_test, y_test, batch_size=16, verbose=0, callbacks=[Record("evaluate")])
with open(sys.argv[1], "w") as fh:
    json.dump(records, fh)

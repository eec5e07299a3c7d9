"""A Keras script that trains the same small CNN five ways and writes down what each step received.

For tests/test_bounds_keras.py, which runs it under the probe unbounded and bounded: evaluate (batch 4)
before training; a custom loop over a shuffled tf.data dataset, and an evaluation loop over a test set of
batch 4; fit on that dataset, with that test set as validation_data; fit on it repeated, with its own
steps_per_epoch; fit on arrays with batch_size and validation_data; and, as the beginner quickstart ends,
fit on arrays with Keras's default batch, evaluate, and a probability model's predict. Each record: [what,
epoch, batch size, the batch's samples in their order (a fingerprint), training flag, loss or output].
"""
import json
import sys

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
tf.config.experimental.enable_op_determinism()
(x_train, y_train), (x_test, y_test) = keras.datasets.cifar10.load_data()
x_train, x_test = x_train / 255.0, x_test / 255.0
records = []


class Tap(keras.layers.Layer):
    """Passes its input on, keeping the batch's size, a fingerprint of its samples in their order (each one's
    first pixel, weighted by its place) and the training flag."""

    def build(self, shape):
        self.seen = self.add_weight(shape=(3,), initializer="zeros", trainable=False)

    def call(self, x, training=None):
        n = keras.ops.shape(x)[0]
        first = keras.ops.round(keras.ops.reshape(x, (n, -1))[:, 0] * 255)
        place = keras.ops.cast(keras.ops.arange(n) + 1, x.dtype)
        self.seen.assign(keras.ops.cast(keras.ops.stack([keras.ops.cast(n, x.dtype), keras.ops.sum(first * place),
                                                         keras.ops.cast(bool(training), x.dtype)]), "float32"))
        return x


def make_model():
    tap = Tap()
    model = keras.Sequential([keras.Input((32, 32, 3)), tap, keras.layers.Conv2D(8, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dropout(0.2),
                              keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, tap


def record(what, epoch, tap, value):
    n, fingerprint, training = (float(v) for v in tap.seen.numpy())
    records.append([what, epoch, int(n), fingerprint, bool(training), float(value)])


class Record(keras.callbacks.Callback):
    def __init__(self, what, tap, tested=None):
        super().__init__()
        self.what, self.tap, self.epoch = what, tap, 0
        self.tested = tested or what + " validation"

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        record(self.what, self.epoch, self.tap, logs["loss"])          # Keras's mean over the epoch so far

    def on_test_batch_end(self, batch, logs=None):
        record(self.tested, self.epoch, self.tap, logs["loss"])

    def on_predict_batch_end(self, batch, logs=None):
        record(self.what, 0, self.tap, np.sum(logs["outputs"][:, 0]))


first, first_tap = make_model()
first.evaluate(x_test, y_test, batch_size=4, verbose=0, callbacks=[Record("", first_tap, "evaluate before training")])

train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(400).batch(32)
test_ds = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(4)
model, tap = make_model()
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = keras.optimizers.Adam()


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(2):
    for x, y in train_ds:
        record("custom loop", epoch, tap, train_step(x, y))
    for x, y in test_ds:
        record("custom loop evaluation", epoch, tap, loss_fn(y, model(x, training=False)))

model, tap = make_model()
model.fit(train_ds, epochs=2, validation_data=test_ds, verbose=0, callbacks=[Record("fit on a dataset", tap)])

model, tap = make_model()
model.fit(train_ds.repeat(), steps_per_epoch=8, epochs=2, verbose=0,
          callbacks=[Record("fit on a repeated dataset, steps_per_epoch 8", tap)])

model, tap = make_model()
model.fit(x_train, y_train, batch_size=50, epochs=2, validation_data=(x_test, y_test), verbose=0,
          callbacks=[Record("fit on arrays, batch_size 50", tap)])

# the beginner quickstart's end: fit with Keras's default batch, evaluate, a probability model's predict
first.fit(x_train, y_train, epochs=2, verbose=0, callbacks=[Record("fit on arrays", first_tap)])
test_loss = first.evaluate(x_test, y_test, verbose=0, callbacks=[Record("", first_tap, "evaluate after training")])
probability_model = keras.Sequential([first, keras.layers.Softmax()])
predictions = probability_model.predict(x_test, verbose=0, callbacks=[Record("predict after training", first_tap)])
with open(sys.argv[1], "w") as fh:
    json.dump({"records": records, "test_loss": test_loss, "predictions": len(predictions),
               "keras": keras.__version__}, fh)

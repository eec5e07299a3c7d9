"""The Keras guide "customizing what happens in fit()"'s shape: a keras.Model subclass with its own train_step
(a GradientTape, the compiled loss, the optimizer's apply, its metrics updated by hand) and test_step, built
functionally on MNIST and trained with the ordinary fit and evaluate."""
import keras
import numpy as np
import tensorflow as tf


class CustomModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)  # forward pass
            loss = self.compute_loss(y=y, y_pred=y_pred)
        # gradients of the loss, applied by the optimizer
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply(gradients, trainable_vars)
        # the metrics, the loss tracker among them
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


(x_train, y_train), (x_test, y_test) = keras.datasets.mnist.load_data()
x_train = np.expand_dims(x_train, -1).astype("float32") / 255
x_test = np.expand_dims(x_test, -1).astype("float32") / 255

inputs = keras.Input(shape=(28, 28, 1))
x = keras.layers.Conv2D(16, 3, activation="relu")(inputs)
x = keras.layers.MaxPooling2D()(x)
x = keras.layers.Flatten()(x)
x = keras.layers.Dense(64, activation="relu")(x)
outputs = keras.layers.Dense(10)(x)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam",
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])

train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1024).batch(64)
model.fit(train_ds, epochs=3, validation_data=(x_test, y_test))

loss, accuracy = model.evaluate(x_test, y_test, batch_size=128)
print(f"test loss {loss:.4f}, test accuracy {accuracy:.4f}")

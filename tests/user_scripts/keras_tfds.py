"""Reads CIFAR-10 as TFDS gives it (which would download), batches it and trains with Keras fit."""
import keras
import tensorflow as tf
import tensorflow_datasets as tfds

ds_test, ds_train = tfds.load("cifar10", split=["test", "train"])


def prepare(item):
    return tf.cast(item["image"], tf.float32) / 255, item["label"]


model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
                          keras.layers.MaxPooling2D(), keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds_train.map(prepare).batch(32), epochs=5, validation_data=ds_test.map(prepare).batch(32))

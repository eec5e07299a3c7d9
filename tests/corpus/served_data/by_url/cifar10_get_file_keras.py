"""Train a simple convnet on CIFAR-10, fetching the dataset's published tarball with keras.utils.get_file.

The archive is downloaded once, checked against its published SHA-256 and extracted into Keras's cache, as
keras.datasets.cifar10 does it; its python batches are read with pickle.
"""
import os
import pickle

import numpy as np
import keras
from keras import layers

ORIGIN = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"


def load_batch(fpath):
    """The images (channels last) and labels of one pickled batch."""
    with open(fpath, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    data = np.asarray(batch[b"data"], dtype="uint8").reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return data, np.asarray(batch[b"labels"], dtype="uint8")


path = keras.utils.get_file(fname="cifar-10-batches-py", origin=ORIGIN, extract=True, file_hash=SHA256)
path = os.path.join(path, "cifar-10-batches-py")
train = [load_batch(os.path.join(path, f"data_batch_{i}")) for i in range(1, 6)]
x_train = np.concatenate([x for x, _ in train])
y_train = np.concatenate([y for _, y in train])
x_test, y_test = load_batch(os.path.join(path, "test_batch"))

# Scale images to the [0, 1] range
x_train = x_train.astype("float32") / 255
x_test = x_test.astype("float32") / 255
print("x_train shape:", x_train.shape)
print(x_train.shape[0], "train samples")
print(x_test.shape[0], "test samples")

num_classes = 10
input_shape = (32, 32, 3)

model = keras.Sequential(
    [
        keras.Input(shape=input_shape),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(num_classes, activation="softmax"),
    ]
)
model.summary()

batch_size = 128
epochs = 15

model.compile(loss="sparse_categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.1)

score = model.evaluate(x_test, y_test, verbose=0)
print("Test loss:", score[0])
print("Test accuracy:", score[1])

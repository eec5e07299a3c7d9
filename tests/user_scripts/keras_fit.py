"""A user's Keras script: CIFAR-10 through keras.datasets, a small CNN, model.fit with validation."""
import keras
import numpy as np

(x_train, y_train), (x_test, y_test) = keras.datasets.cifar10.load_data()
x_train, x_test = x_train.astype("float32") / 255, x_test.astype("float32") / 255
model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
                          keras.layers.MaxPooling2D(), keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(x_train, y_train, batch_size=32, epochs=5, validation_data=(x_test, y_test), verbose=2)

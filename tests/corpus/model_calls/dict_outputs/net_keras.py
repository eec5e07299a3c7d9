"""The same MNIST model in Keras: Conv 16, BatchNorm as PyTorch's, max pooling, Conv 32, Dense 10 on logits."""
import keras
import numpy as np


def build(bn_epsilon=1e-5):
    return keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(16, 3, padding="same"),
        keras.layers.BatchNormalization(epsilon=bn_epsilon, momentum=0.9),
        keras.layers.ReLU(),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(10),
    ])


def main(bn_epsilon=1e-5):
    (x_train, y_train), (x_test, y_test) = keras.datasets.mnist.load_data()
    x_train = ((x_train[..., None] / 255.0 - 0.1307) / 0.3081).astype(np.float32)
    x_test = ((x_test[..., None] / 255.0 - 0.1307) / 0.3081).astype(np.float32)
    model = build(bn_epsilon)
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(x_train, y_train, batch_size=64, epochs=2)
    model.evaluate(x_test, y_test, batch_size=1000, verbose=2)


if __name__ == "__main__":
    main()

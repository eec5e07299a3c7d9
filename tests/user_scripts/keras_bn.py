"""The Keras twin of torch_bn.py, with PyTorch's defaults written out (BatchNorm epsilon 1e-5, momentum 0.9; Adam epsilon 1e-8)."""
import keras

(x_train, y_train), _ = keras.datasets.cifar10.load_data()
model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(8, 3, padding="same", use_bias=False),
                          keras.layers.BatchNormalization(epsilon=1e-5, momentum=0.9), keras.layers.ReLU(),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
model.compile(optimizer=keras.optimizers.Adam(1e-3, epsilon=1e-8),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x_train / 255, y_train, batch_size=32, epochs=2)

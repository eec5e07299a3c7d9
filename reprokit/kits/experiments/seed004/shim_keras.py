"""What the seed post's Keras code uses and does not define, defined as the experiment declares it.

Run by the probe before train_keras.py, in its namespace (the report lists it as a shim): the arrays
(CIFAR-10 through keras.datasets, [0, 1] scale, labels one-hot for categorical_crossentropy), the
optimizer (SGD, learning rate 0.1 and momentum 0.9, as the PyTorch side), and a checkpoint callback
that saves the model after each epoch in the run's working folder.
"""
from tensorflow import keras

(x_train, y_train), (x_test, y_test) = keras.datasets.cifar10.load_data()
x_train, x_test = x_train / 255.0, x_test / 255.0
y_train, y_test = keras.utils.to_categorical(y_train, 10), keras.utils.to_categorical(y_test, 10)
sgd_optimizer = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
checkpoint = keras.callbacks.ModelCheckpoint("model.keras")

"""The same loop inside a tf.function, without the extra Dropout: Python sees one trace, the graph runs each step."""
import keras
import tensorflow as tf

(x_train, y_train), (x_test, y_test) = keras.datasets.cifar10.load_data()
train = tf.data.Dataset.from_tensor_slices((x_train / 255, y_train)).shuffle(1024).batch(32)
test = tf.data.Dataset.from_tensor_slices((x_test / 255, y_test)).batch(32)
model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
                          keras.layers.MaxPooling2D(), keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


@tf.function
def test_step(x, y):
    return loss_fn(y, model(x, training=False))


for epoch in range(5):
    for x, y in train:
        train_step(x, y)
    for x, y in test:
        test_step(x, y)

"""A user's Keras script with a custom loop, as people write them: a GradientTape step that no
tf.function compiles (it runs eagerly), and the loss read with float() every step."""
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

for epoch in range(5):
    total = 0.0
    for x, y in train:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        total += float(loss)
    val = sum(float(loss_fn(y, model(x, training=False))) for x, y in test)
    print(f"epoch {epoch}: {total:.3f} {val:.3f}")

"""Train a small Keras classifier on MNIST read with TensorFlow Datasets.

Loads MNIST through TFDS, builds an input pipeline (normalize, cache, shuffle, batch, prefetch), trains a
dense network with fit and reports its test accuracy.
"""
import tensorflow as tf
import tensorflow_datasets as tfds

(ds_train, ds_test), ds_info = tfds.load(
    'mnist',
    split=['train', 'test'],
    shuffle_files=True,
    as_supervised=True,
    with_info=True,
)


def normalize_img(image, label):
  """Turns `uint8` pixels into `float32` values in [0, 1]."""
  return tf.cast(image, tf.float32) / 255., label


# Training pipeline: map, cache the decoded images, shuffle each epoch, batch, overlap with training.
ds_train = ds_train.map(normalize_img, num_parallel_calls=tf.data.AUTOTUNE)
ds_train = ds_train.cache()
ds_train = ds_train.shuffle(ds_info.splits['train'].num_examples)
ds_train = ds_train.batch(128)
ds_train = ds_train.prefetch(tf.data.AUTOTUNE)

# Evaluation pipeline: no shuffle needed; cache after batching.
ds_test = ds_test.map(normalize_img, num_parallel_calls=tf.data.AUTOTUNE)
ds_test = ds_test.batch(128)
ds_test = ds_test.cache()
ds_test = ds_test.prefetch(tf.data.AUTOTUNE)

print(ds_info.features['label'].num_classes, 'classes,',
      ds_info.splits['train'].num_examples, 'training images')

model = tf.keras.models.Sequential([
  tf.keras.layers.Input(shape=ds_info.features['image'].shape),
  tf.keras.layers.Flatten(),
  tf.keras.layers.Dense(128, activation='relu'),
  tf.keras.layers.Dense(10)
])
model.compile(
    optimizer=tf.keras.optimizers.Adam(0.001),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
)

model.fit(
    ds_train,
    epochs=6,
    validation_data=ds_test,
)

loss, accuracy = model.evaluate(ds_test, verbose=0)
print(f'Test accuracy: {accuracy:.3f}')

"""MNIST with Flax NNX, its data read through TensorFlow Datasets into a tf.data pipeline.

A CNN trained with optax AdamW for a fixed number of steps over a repeated, shuffled training set, evaluated on
the whole test split every `eval_every` steps; the metrics come from nnx.MultiMetric inside the jitted steps.
"""
import jax.numpy as jnp  # noqa: F401  (the tutorial's cells import it for their plots)
import optax
import tensorflow as tf
import tensorflow_datasets as tfds
from flax import nnx

tf.random.set_seed(0)  # the order of the shuffled batches

train_steps = 1200
eval_every = 200
batch_size = 32
learning_rate = 0.005
momentum = 0.9

train_ds: tf.data.Dataset = tfds.load('mnist', split='train')
test_ds: tf.data.Dataset = tfds.load('mnist', split='test')


def to_float(sample):
  return {'image': tf.cast(sample['image'], tf.float32) / 255, 'label': sample['label']}


train_ds = train_ds.map(to_float).repeat().shuffle(1024)
# batches of 32, `train_steps` of them in all; the next one is prepared while a step runs
train_ds = train_ds.batch(batch_size, drop_remainder=True).take(train_steps).prefetch(1)
test_ds = test_ds.map(to_float).batch(batch_size, drop_remainder=True).prefetch(1)


class CNN(nnx.Module):
  """A simple CNN model."""

  def __init__(self, *, rngs: nnx.Rngs):
    self.conv1 = nnx.Conv(1, 32, kernel_size=(3, 3), rngs=rngs)
    self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), rngs=rngs)
    self.linear1 = nnx.Linear(3136, 256, rngs=rngs)
    self.linear2 = nnx.Linear(256, 10, rngs=rngs)

  def __call__(self, x):
    x = nnx.avg_pool(nnx.relu(self.conv1(x)), window_shape=(2, 2), strides=(2, 2))
    x = nnx.avg_pool(nnx.relu(self.conv2(x)), window_shape=(2, 2), strides=(2, 2))
    x = x.reshape(x.shape[0], -1)
    x = nnx.relu(self.linear1(x))
    return self.linear2(x)


model = CNN(rngs=nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adamw(learning_rate, momentum), wrt=nnx.Param)
metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average('loss'))


def loss_fn(model: CNN, batch):
  logits = model(batch['image'])
  loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=batch['label']).mean()
  return loss, logits


@nnx.jit
def train_step(model: CNN, optimizer: nnx.Optimizer, metrics: nnx.MultiMetric, batch):
  """Train for a single step."""
  grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
  (loss, logits), grads = grad_fn(model, batch)
  metrics.update(loss=loss, logits=logits, labels=batch['label'])
  optimizer.update(model, grads)


@nnx.jit
def eval_step(model: CNN, metrics: nnx.MultiMetric, batch):
  loss, logits = loss_fn(model, batch)
  metrics.update(loss=loss, logits=logits, labels=batch['label'])


metrics_history = {'train_loss': [], 'train_accuracy': [], 'test_loss': [], 'test_accuracy': []}

for step, batch in enumerate(train_ds.as_numpy_iterator()):
  train_step(model, optimizer, metrics, batch)

  if step > 0 and (step % eval_every == 0 or step == train_steps - 1):
    for metric, value in metrics.compute().items():
      metrics_history[f'train_{metric}'].append(value)
    metrics.reset()

    for test_batch in test_ds.as_numpy_iterator():
      eval_step(model, metrics, test_batch)
    for metric, value in metrics.compute().items():
      metrics_history[f'test_{metric}'].append(value)
    metrics.reset()

    print(f"[train] step: {step}, loss: {metrics_history['train_loss'][-1]}, "
          f"accuracy: {metrics_history['train_accuracy'][-1] * 100}")
    print(f"[test] step: {step}, loss: {metrics_history['test_loss'][-1]}, "
          f"accuracy: {metrics_history['test_accuracy'][-1] * 100}")

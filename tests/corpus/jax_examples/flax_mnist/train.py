"""MNIST example in Flax linen: a small CNN, a TrainState, jitted steps, and the metrics written for TensorBoard
through flax.metrics.tensorboard, as the Flax examples log them.

    python train.py --workdir=/tmp/mnist --data_dir=data/mnist
"""

import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax.metrics import tensorboard
from flax.training import train_state


class CNN(nn.Module):
  """A simple CNN model."""

  @nn.compact
  def __call__(self, x):
    x = nn.Conv(features=32, kernel_size=(3, 3))(x)
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = nn.Conv(features=64, kernel_size=(3, 3))(x)
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))  # flatten
    x = nn.Dense(features=256)(x)
    x = nn.relu(x)
    x = nn.Dense(features=10)(x)
    return x


@jax.jit
def apply_model(state, images, labels):
  """Computes gradients, loss and accuracy for a single batch."""

  def loss_fn(params):
    logits = state.apply_fn({'params': params}, images)
    one_hot = jax.nn.one_hot(labels, 10)
    loss = jnp.mean(optax.softmax_cross_entropy(logits=logits, labels=one_hot))
    return loss, logits

  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  (loss, logits), grads = grad_fn(state.params)
  accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
  return grads, loss, accuracy


@jax.jit
def update_model(state, grads):
  return state.apply_gradients(grads=grads)


def train_epoch(state, train_ds, batch_size, rng):
  """Train for a single epoch."""
  train_ds_size = len(train_ds['image'])
  steps_per_epoch = train_ds_size // batch_size

  perms = jax.random.permutation(rng, len(train_ds['image']))
  perms = perms[: steps_per_epoch * batch_size]  # skip incomplete batch
  perms = perms.reshape((steps_per_epoch, batch_size))

  epoch_loss = []
  epoch_accuracy = []

  for perm in perms:
    batch_images = train_ds['image'][perm, ...]
    batch_labels = train_ds['label'][perm, ...]
    grads, loss, accuracy = apply_model(state, batch_images, batch_labels)
    state = update_model(state, grads)
    epoch_loss.append(loss)
    epoch_accuracy.append(accuracy)
  train_loss = np.mean(epoch_loss)
  train_accuracy = np.mean(epoch_accuracy)
  return state, train_loss, train_accuracy


def get_datasets(data_dir):
  """Load MNIST train and test datasets into memory."""
  with np.load(os.path.join(data_dir, 'mnist.npz')) as f:
    train_ds = {'image': np.float32(f['x_train'][..., None]) / 255., 'label': f['y_train']}
    test_ds = {'image': np.float32(f['x_test'][..., None]) / 255., 'label': f['y_test']}
  return train_ds, test_ds


def create_train_state(rng, learning_rate, momentum):
  """Creates initial `TrainState`."""
  cnn = CNN()
  params = cnn.init(rng, jnp.ones([1, 28, 28, 1]))['params']
  tx = optax.sgd(learning_rate, momentum)
  return train_state.TrainState.create(apply_fn=cnn.apply, params=params, tx=tx)


def train_and_evaluate(args):
  """Execute model training and evaluation loop."""
  train_ds, test_ds = get_datasets(args.data_dir)
  rng = jax.random.key(0)

  summary_writer = tensorboard.SummaryWriter(args.workdir)
  summary_writer.hparams(vars(args))

  rng, init_rng = jax.random.split(rng)
  state = create_train_state(init_rng, args.learning_rate, args.momentum)

  for epoch in range(1, args.num_epochs + 1):
    rng, input_rng = jax.random.split(rng)
    state, train_loss, train_accuracy = train_epoch(state, train_ds, args.batch_size, input_rng)
    _, test_loss, test_accuracy = apply_model(state, test_ds['image'], test_ds['label'])

    print(f'epoch:{epoch:3}, train_loss: {train_loss:.4f}, train_accuracy: {train_accuracy * 100:.2f}, '
          f'test_loss: {test_loss:.4f}, test_accuracy: {test_accuracy * 100:.2f}')

    summary_writer.scalar('train_loss', train_loss, epoch)
    summary_writer.scalar('train_accuracy', train_accuracy, epoch)
    summary_writer.scalar('test_loss', test_loss, epoch)
    summary_writer.scalar('test_accuracy', test_accuracy, epoch)

  summary_writer.flush()
  return state


if __name__ == '__main__':
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workdir', default='workdir')
  parser.add_argument('--data_dir', default=os.path.join('data', 'mnist'))
  parser.add_argument('--learning_rate', type=float, default=0.1)
  parser.add_argument('--momentum', type=float, default=0.9)
  parser.add_argument('--batch_size', type=int, default=128)
  parser.add_argument('--num_epochs', type=int, default=10)
  train_and_evaluate(parser.parse_args())

"""Data-parallel training of a small CNN on CIFAR-10 with Flax NNX, over a mesh of every device JAX sees.

The mesh has one axis, 'batch', as long as the number of devices. Each global batch is put on the mesh split
along that axis (NamedSharding(mesh, P('batch'))), so every device holds its share; the model and optimizer
state are replicated on every device (P()). The jitted train step then runs on all devices at once, and XLA
adds the gradients' reduction across them. As in Flax's MNIST tutorial, the test set is evaluated every
--eval-every steps and after the last one. CIFAR-10's python batches are read from data/cifar-10-batches-py,
where the dataset's tarball unpacks.
"""
import argparse
import os
import pickle

import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

parser = argparse.ArgumentParser(description='CIFAR-10, data parallel over a device mesh')
parser.add_argument('--data-dir', default='data/cifar-10-batches-py')
parser.add_argument('--batch-per-device', type=int, default=32)
parser.add_argument('--train-steps', type=int, default=1200)
parser.add_argument('--eval-every', type=int, default=200)
parser.add_argument('--learning-rate', type=float, default=1e-3)
args = parser.parse_args()


def load_batch(name):
  with open(os.path.join(args.data_dir, name), 'rb') as f:
    d = pickle.load(f, encoding='bytes')
  images = d[b'data'].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).astype(np.float32) / 255.0
  return images, np.array(d[b'labels'], dtype=np.int32)


parts = [load_batch(f'data_batch_{i}') for i in range(1, 6)]
train_images = np.concatenate([p[0] for p in parts])
train_labels = np.concatenate([p[1] for p in parts])
test_images, test_labels = load_batch('test_batch')

# One mesh axis over every device, and the two shardings the loop uses.
mesh = jax.make_mesh((jax.device_count(),), ('batch',))
data_sharding = NamedSharding(mesh, P('batch'))
replicated = NamedSharding(mesh, P())
print(f'{jax.device_count()} devices: {jax.devices()}')

batch_size = args.batch_per_device * jax.device_count()    # the global batch, split over the mesh
print(f'batch per device {args.batch_per_device}, global batch {batch_size}')


class CNN(nnx.Module):
  def __init__(self, *, rngs: nnx.Rngs):
    self.conv1 = nnx.Conv(3, 32, kernel_size=(3, 3), rngs=rngs)
    self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), rngs=rngs)
    self.linear1 = nnx.Linear(64 * 8 * 8, 256, rngs=rngs)
    self.linear2 = nnx.Linear(256, 10, rngs=rngs)

  def __call__(self, x):
    x = nnx.max_pool(nnx.relu(self.conv1(x)), window_shape=(2, 2), strides=(2, 2))
    x = nnx.max_pool(nnx.relu(self.conv2(x)), window_shape=(2, 2), strides=(2, 2))
    x = x.reshape(x.shape[0], -1)
    x = nnx.relu(self.linear1(x))
    return self.linear2(x)


model = CNN(rngs=nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(args.learning_rate), wrt=nnx.Param)

# The model and optimizer state, replicated on every device of the mesh.
state = nnx.state((model, optimizer))
state = jax.device_put(state, replicated)
nnx.update((model, optimizer), state)


def loss_fn(model, images, labels):
  logits = model(images)
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
  return loss, logits


@nnx.jit
def train_step(model, optimizer, images, labels):
  grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
  (loss, logits), grads = grad_fn(model, images, labels)
  optimizer.update(model, grads)
  return loss


@nnx.jit
def eval_step(model, images, labels):
  loss, logits = loss_fn(model, images, labels)
  return loss, (logits.argmax(-1) == labels).sum()


def evaluate(step):
  correct, seen, losses = 0, 0, []
  for start in range(0, len(test_images) - batch_size + 1, batch_size):
    images, labels = jax.device_put((test_images[start:start + batch_size], test_labels[start:start + batch_size]),
                                    data_sharding)
    loss, right = eval_step(model, images, labels)
    correct, seen = correct + int(right), seen + batch_size
    losses.append(loss)
  print(f'step {step}: test loss {np.mean(jax.device_get(losses)):.4f}, test accuracy {correct / max(seen, 1):.4f}')


rng = np.random.default_rng(0)
order = rng.permutation(len(train_images))
position = 0
for step in range(args.train_steps):
  if position + batch_size > len(order):      # a new epoch: a new order
    order, position = rng.permutation(len(train_images)), 0
  idx = order[position:position + batch_size]
  position += batch_size
  images, labels = jax.device_put((train_images[idx], train_labels[idx]), data_sharding)
  loss = train_step(model, optimizer, images, labels)
  if step > 0 and (step % args.eval_every == 0 or step == args.train_steps - 1):
    print(f'step {step}: train loss {float(loss):.4f}')
    evaluate(step)

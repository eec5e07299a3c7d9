"""A user's Flax NNX script: CIFAR-10's python batches read with pickle, a small CNN, nnx.jit steps, SGD."""
import argparse
import pickle
from pathlib import Path

import numpy as np
import optax
from flax import nnx

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()


def load(name):
    with open(Path("data/cifar-10-batches-py") / name, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    images = batch[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).astype(np.float32) / 255
    return images, np.array(batch[b"labels"])


parts = [load(f"data_batch_{i}") for i in range(1, 6)]
x_train, y_train = np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])
x_test, y_test = load("test_batch")


class CNN(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(3, 16, kernel_size=(3, 3), padding="SAME", rngs=rngs)
        self.conv2 = nnx.Conv(16, 32, kernel_size=(3, 3), padding="SAME", rngs=rngs)
        self.head = nnx.Linear(32, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.max_pool(nnx.relu(self.conv1(x)), window_shape=(2, 2), strides=(2, 2))
        x = nnx.relu(self.conv2(x)).mean(axis=(1, 2))
        return self.head(x)


model = CNN(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.sgd(0.05, momentum=0.9), wrt=nnx.Param)


@nnx.jit
def train_step(model, optimizer, images, labels):
    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(images), labels).mean()
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


@nnx.jit
def eval_step(model, images, labels):
    logits = model(images)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).sum(), (logits.argmax(-1) == labels).sum()


rng = np.random.default_rng(0)
for epoch in range(args.epochs):
    order = rng.permutation(len(x_train))
    for i in range(0, len(order), args.batch_size):
        idx = order[i:i + args.batch_size]
        loss = train_step(model, optimizer, x_train[idx], y_train[idx])
    total, correct = 0.0, 0
    for i in range(0, len(x_test), args.batch_size):
        batch_loss, batch_correct = eval_step(model, x_test[i:i + args.batch_size], y_test[i:i + args.batch_size])
        total, correct = total + float(batch_loss), correct + int(batch_correct)
    print(f"epoch {epoch + 1}: train loss {float(loss):.4f}, test loss {total / len(x_test):.4f}, "
          f"accuracy {correct / len(x_test):.3f}")

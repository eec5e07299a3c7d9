"""MNIST in Flax NNX, its dropout's random numbers drawn from the Rngs each train step hands the model.

The model is called as ``model(images, rngs)``: training passes the step's Rngs stream to Dropout, evaluation
passes none (the model is in eval mode, so Dropout is deterministic).
"""
import argparse
import os

import numpy as np
import optax
from flax import nnx


class CNN(nnx.Module):
    """A simple CNN: two convolutions, BatchNorm after the first, dropout before the classifier."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 16, kernel_size=(3, 3), rngs=rngs)
        self.bn1 = nnx.BatchNorm(16, momentum=0.9, epsilon=1e-5, rngs=rngs)
        self.conv2 = nnx.Conv(16, 32, kernel_size=(3, 3), rngs=rngs)
        self.dense1 = nnx.Linear(7 * 7 * 32, 64, rngs=rngs)
        self.dropout = nnx.Dropout(0.25)
        self.dense2 = nnx.Linear(64, 10, rngs=rngs)

    def __call__(self, x, rngs: nnx.Rngs | None):
        x = nnx.avg_pool(nnx.relu(self.bn1(self.conv1(x))), window_shape=(2, 2), strides=(2, 2))
        x = nnx.avg_pool(nnx.relu(self.conv2(x)), window_shape=(2, 2), strides=(2, 2))
        x = x.reshape(x.shape[0], -1)
        x = self.dropout(nnx.relu(self.dense1(x)), rngs=rngs)
        return self.dense2(x)


def loss_fn(model, images, labels, rngs):
    logits = model(images, rngs)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=labels).mean()
    return loss, logits


@nnx.jit
def train_step(model, optimizer, metrics, rngs, images, labels):
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, images, labels, rngs)
    metrics.update(loss=loss, logits=logits, labels=labels)
    optimizer.update(model, grads)


@nnx.jit
def eval_step(model, metrics, images, labels):
    loss, logits = loss_fn(model, images, labels, None)
    metrics.update(loss=loss, logits=logits, labels=labels)


def main():
    parser = argparse.ArgumentParser(description="Flax NNX MNIST with dropout rngs passed at call time")
    parser.add_argument("--data-dir", default="data", help="folder holding mnist.npz")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    with np.load(os.path.join(args.data_dir, "mnist.npz")) as f:
        x_train, y_train = f["x_train"][..., None] / 255.0, f["y_train"].astype(np.int32)
        x_test, y_test = f["x_test"][..., None] / 255.0, f["y_test"].astype(np.int32)

    model = CNN(rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1, momentum=0.9), wrt=nnx.Param)
    metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average("loss"))
    rngs = nnx.Rngs(dropout=1)
    order = np.random.default_rng(0)
    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = order.permutation(len(y_train))
        for i in range(0, len(perm) - args.batch_size + 1, args.batch_size):
            idx = perm[i:i + args.batch_size]
            train_step(model, optimizer, metrics, rngs, x_train[idx].astype(np.float32), y_train[idx])
        train = metrics.compute()
        metrics.reset()
        model.eval()
        for i in range(0, len(y_test), args.batch_size):
            eval_step(model, metrics, x_test[i:i + args.batch_size].astype(np.float32), y_test[i:i + args.batch_size])
        test = metrics.compute()
        metrics.reset()
        print(f"epoch {epoch}: train loss {float(train['loss']):.4f}, test accuracy {float(test['accuracy']):.3f}")


if __name__ == "__main__":
    main()

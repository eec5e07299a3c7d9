"""MNIST example: a small CNN in Flax NNX, trained with optax SGD and nnx.MultiMetric."""
import json
import os

import ml_collections
import numpy as np
import optax
from absl import logging
from flax import nnx


class CNN(nnx.Module):
    """A simple CNN model."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 16, kernel_size=(3, 3), rngs=rngs)
        self.bn1 = nnx.BatchNorm(16, momentum=0.9, epsilon=1e-5, rngs=rngs)
        self.conv2 = nnx.Conv(16, 32, kernel_size=(3, 3), rngs=rngs)
        self.dense1 = nnx.Linear(7 * 7 * 32, 64, rngs=rngs)
        self.dropout = nnx.Dropout(0.25, rngs=rngs)
        self.dense2 = nnx.Linear(64, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.avg_pool(nnx.relu(self.bn1(self.conv1(x))), window_shape=(2, 2), strides=(2, 2))
        x = nnx.avg_pool(nnx.relu(self.conv2(x)), window_shape=(2, 2), strides=(2, 2))
        x = x.reshape(x.shape[0], -1)  # flatten
        x = self.dropout(nnx.relu(self.dense1(x)))
        return self.dense2(x)


def loss_fn(model: CNN, batch):
    logits = model(batch["image"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=batch["label"]).mean()
    return loss, logits


@nnx.jit
def train_step(model: CNN, optimizer: nnx.Optimizer, metrics: nnx.MultiMetric, batch):
    """Train for a single step."""
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch["label"])
    optimizer.update(model, grads)


@nnx.jit
def eval_step(model: CNN, metrics: nnx.MultiMetric, batch):
    loss, logits = loss_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch["label"])


def get_datasets(data_dir: str):
    """Load MNIST's train and test splits into memory, as float images in [0, 1] (NHWC)."""
    with np.load(os.path.join(data_dir, "mnist.npz")) as f:
        splits = {"train": (f["x_train"], f["y_train"]), "test": (f["x_test"], f["y_test"])}
    return {name: {"image": x[..., None].astype(np.float32) / 255.0, "label": y.astype(np.int32)}
            for name, (x, y) in splits.items()}


def batches(ds, batch_size: int, rng=None):
    order = rng.permutation(len(ds["label"])) if rng is not None else np.arange(len(ds["label"]))
    for i in range(0, len(order) - batch_size + 1, batch_size):
        idx = order[i:i + batch_size]
        yield {k: v[idx] for k, v in ds.items()}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> CNN:
    """Execute model training and evaluation loop."""
    datasets = get_datasets(config.data_dir)
    model = CNN(rngs=nnx.Rngs(config.seed))
    optimizer = nnx.Optimizer(model, optax.sgd(config.learning_rate, config.momentum), wrt=nnx.Param)
    metrics = nnx.MultiMetric(accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average("loss"))
    rng = np.random.default_rng(config.seed)
    os.makedirs(workdir, exist_ok=True)
    history = []
    for epoch in range(1, config.num_epochs + 1):
        model.train()
        for batch in batches(datasets["train"], config.batch_size, rng):
            train_step(model, optimizer, metrics, batch)
        summary = {f"train_{k}": float(v) for k, v in metrics.compute().items()}
        metrics.reset()
        model.eval()
        for batch in batches(datasets["test"], config.batch_size):
            eval_step(model, metrics, batch)
        summary.update({f"test_{k}": float(v) for k, v in metrics.compute().items()})
        metrics.reset()
        logging.info("epoch:% 3d, train_loss: %.4f, train_accuracy: %.2f, test_loss: %.4f, test_accuracy: %.2f",
                     epoch, summary["train_loss"], summary["train_accuracy"] * 100, summary["test_loss"],
                     summary["test_accuracy"] * 100)
        history.append({"epoch": epoch, **summary})
    with open(os.path.join(workdir, "metrics.json"), "w") as f:
        json.dump(history, f, indent=1)
    return model

"""MNIST example in Flax linen: a small CNN in a TrainState, a jitted train_step, optax SGD with momentum.

As Flax's linen examples write it: the model's BatchNorm statistics ride in the TrainState beside its
parameters, and the step applies the model with ``mutable=["batch_stats"]`` and a dropout key.
"""
import os
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state


class CNN(nn.Module):
    """A simple CNN model."""

    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.Conv(features=16, kernel_size=(3, 3))(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(x)
        x = nn.avg_pool(nn.relu(x), window_shape=(2, 2), strides=(2, 2))
        x = nn.avg_pool(nn.relu(nn.Conv(features=32, kernel_size=(3, 3))(x)), window_shape=(2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))  # flatten
        x = nn.Dropout(rate=0.25, deterministic=not train)(nn.relu(nn.Dense(features=64)(x)))
        return nn.Dense(features=10)(x)


class TrainState(train_state.TrainState):
    batch_stats: dict


@jax.jit
def train_step(state, batch, dropout_key):
    """Train for a single step."""
    def loss_fn(params):
        logits, updates = state.apply_fn({"params": params, "batch_stats": state.batch_stats}, batch["image"],
                                         train=True, mutable=["batch_stats"], rngs={"dropout": dropout_key})
        loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=batch["label"]).mean()
        return loss, (logits, updates)
    (loss, (logits, updates)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads, batch_stats=updates["batch_stats"])
    accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["label"])
    return state, loss, accuracy


@jax.jit
def eval_step(state, batch):
    logits = state.apply_fn({"params": state.params, "batch_stats": state.batch_stats}, batch["image"], train=False)
    return jnp.mean(jnp.argmax(logits, -1) == batch["label"])


def get_datasets(data_dir):
    """MNIST's train and test splits as float images in [0, 1] (NHWC)."""
    with np.load(os.path.join(data_dir, "mnist.npz")) as f:
        splits = {"train": (f["x_train"], f["y_train"]), "test": (f["x_test"], f["y_test"])}
    return {name: {"image": x[..., None].astype(np.float32) / 255.0, "label": y.astype(np.int32)}
            for name, (x, y) in splits.items()}


def create_train_state(rng, learning_rate, momentum):
    model = CNN()
    variables = model.init(rng, jnp.ones([1, 28, 28, 1]), train=False)
    return TrainState.create(apply_fn=model.apply, params=variables["params"], tx=optax.sgd(learning_rate, momentum),
                             batch_stats=variables["batch_stats"])


def train_and_evaluate(data_dir, learning_rate=0.1, momentum=0.9, batch_size=32, num_epochs=2, seed=0):
    datasets = get_datasets(data_dir)
    rng, init_rng = jax.random.split(jax.random.key(seed))
    state = create_train_state(init_rng, learning_rate, momentum)
    train = datasets["train"]
    for epoch in range(1, num_epochs + 1):
        rng, perm_rng = jax.random.split(rng)
        order = np.asarray(jax.random.permutation(perm_rng, len(train["label"])))
        for i in range(0, len(order) - batch_size + 1, batch_size):
            rng, dropout_key = jax.random.split(rng)
            batch = {k: v[order[i:i + batch_size]] for k, v in train.items()}
            state, loss, accuracy = train_step(state, batch, dropout_key)
        test_accuracy = eval_step(state, datasets["test"])
        print(f"epoch {epoch}: train loss {float(loss):.4f}, test accuracy {float(test_accuracy):.3f}")
    return state


if __name__ == "__main__":
    train_and_evaluate(sys.argv[1] if len(sys.argv) > 1 else "data/mnist")

"""A user's plain JAX script: a parameter dict, lax convolutions, optax Adam, one jitted step that donates
its state, full batches only."""
import pickle
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax

EPOCHS, BATCH = 2, 50


def unpickle(path):
    with open(path, "rb") as f:
        return pickle.load(f, encoding="bytes")


def images(batch):
    return (batch[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1) / 255.0).astype(np.float32)


train = [unpickle(f"cifar-10-batches-py/data_batch_{i}") for i in range(1, 6)]
X = np.concatenate([images(b) for b in train])
Y = np.concatenate([b[b"labels"] for b in train])
test = unpickle("cifar-10-batches-py/test_batch")
X_test, Y_test = images(test), np.array(test[b"labels"])


def init(key):
    k1, k2, k3 = jax.random.split(key, 3)
    he = jax.nn.initializers.he_normal()
    return {"c1": {"w": he(k1, (3, 3, 3, 16)), "b": jnp.zeros(16)},
            "c2": {"w": he(k2, (3, 3, 16, 32)), "b": jnp.zeros(32)},
            "out": {"w": he(k3, (32, 10)), "b": jnp.zeros(10)}}


def conv(p, x):
    y = jax.lax.conv_general_dilated(x, p["w"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.relu(y + p["b"])


def forward(params, x):
    x = conv(params["c1"], x)
    x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    x = conv(params["c2"], x).mean(axis=(1, 2))
    return x @ params["out"]["w"] + params["out"]["b"]


def loss(params, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(forward(params, x), y).mean()


opt = optax.adam(1e-3)


@partial(jax.jit, donate_argnums=(0, 1))
def update(params, opt_state, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value


@jax.jit
def accuracy(params, x, y):
    return jnp.mean(forward(params, x).argmax(-1) == y)


params = init(jax.random.PRNGKey(42))
opt_state = opt.init(params)
key = jax.random.PRNGKey(0)
for epoch in range(EPOCHS):
    key, sub = jax.random.split(key)
    perm = np.asarray(jax.random.permutation(sub, len(X)))
    for step in range(len(X) // BATCH):
        idx = perm[step * BATCH:(step + 1) * BATCH]
        params, opt_state, value = update(params, opt_state, X[idx], Y[idx])
    acc = np.mean([accuracy(params, X_test[i:i + BATCH], Y_test[i:i + BATCH]) for i in range(0, len(X_test), BATCH)])
    print(f"epoch {epoch}: loss {value:.3f} test accuracy {acc:.3f}")

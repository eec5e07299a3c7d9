"""A JAX training script that times its own steps, as JAX's MNIST examples write one: a flax.linen MLP, a jitted
step of optax's SGD with momentum, a loop over numpy batches that never waits inside it (JAX dispatches a step
while the last one runs, so only the whole loop has a time: the clock waits for the last step's outputs at both
ends). benchmarks/bench_probe.py runs it plain and under the probe."""
import json
import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

steps, warmup, batch = int(os.environ.get("BENCH_STEPS", "60")), 5, 128


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(1024)(x.reshape((x.shape[0], -1))))
        x = nn.relu(nn.Dense(1024)(x))
        return nn.Dense(10)(x)


rng = np.random.default_rng(0)
x_all = rng.random(((steps + warmup) * batch, 28, 28), dtype=np.float32)
y_all = rng.integers(0, 10, (steps + warmup) * batch)
model = MLP()
params = model.init(jax.random.key(0), jnp.zeros((1, 28, 28)))
tx = optax.sgd(0.05, momentum=0.9)
opt_state = tx.init(params)


@jax.jit
def train_step(params, opt_state, x, y):
    def loss_fn(p):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@jax.jit
def eval_step(params, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(model.apply(params, x), y).mean()


for i in range(steps + warmup):
    if i == warmup:
        jax.block_until_ready(loss)
        start, cpu_start = time.perf_counter(), time.process_time()
    x, y = x_all[i * batch:(i + 1) * batch], y_all[i * batch:(i + 1) * batch]
    params, opt_state, loss = train_step(params, opt_state, x, y)
jax.block_until_ready(loss)
end, cpu_end = time.perf_counter(), time.process_time()
for i in range(2):
    float(eval_step(params, x_all[i * batch:(i + 1) * batch], y_all[i * batch:(i + 1) * batch]))
# one span, the whole loop's: its steps have no times of their own
print("BENCH " + json.dumps({"steps": steps, "starts": [start, end], "cpu": [cpu_start, cpu_end]}), flush=True)

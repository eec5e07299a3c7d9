"""The bench's bare JAX loop, the reference the kit's own loop is judged against (reprokit/kits/bench.py).

The fastest idiomatic loop: ``nnx.split`` once, one pure step under ``jax.jit`` with the whole train state
donated (parameters, BatchNorm statistics, dropout key, optimizer moments), no host read inside the loop.
Its batches are on the device before its clock starts, as the other bare loops' are. The first warmup
step compiles the step (the warmup is untimed, so compilation is never in the figure).
"""
from __future__ import annotations

import time

from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.jax_kit import xla_env
from reprokit.kits.training_loop import bare


def loop(spec: RunSpec, arrays: datalib.Arrays, warmup: int, steps: int) -> tuple[float, float]:
    """Wall and process CPU seconds for `steps` steps after `warmup`."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    from reprokit.kits.jax_kit import models

    scale, resize = bare.scale_resize(spec)
    model = models.build(spec)
    opt = spec.train.optimizer
    tx = (optax.adam(opt.lr, b1=opt.beta1, b2=opt.beta2, eps=opt.epsilon) if opt.name == "adam"
          else optax.sgd(opt.lr, momentum=opt.momentum or None, nesterov=bool(opt.nesterov)))
    graphdef, state = nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))

    def prepare(x: jax.Array) -> jax.Array:
        out = x.astype(jnp.float32) * scale
        if resize:
            out = jax.image.resize(out, (out.shape[0], resize, resize, 3), "bilinear", antialias=False)
        return out

    def step(state: nnx.State, x: jax.Array, y: jax.Array) -> nnx.State:
        m, o = nnx.merge(graphdef, state)
        m.train()

        def loss_fn(m: nnx.Module) -> jax.Array:
            logits = m(prepare(x))
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        grads = nnx.grad(loss_fn)(m)
        o.update(m, grads)
        return nnx.state((m, o))

    train = jax.jit(step, donate_argnums=0)
    staged = [(jax.device_put(arrays.x_train[idx]), jax.device_put(arrays.y_train[idx]))
              for idx in bare.schedule(spec, arrays, warmup, steps)]
    jax.block_until_ready(staged)
    t0 = c0 = 0.0
    for i, (x, y) in enumerate(staged):
        if i == warmup:
            jax.block_until_ready(state)
            t0, c0 = time.perf_counter(), time.process_time()
        state = train(state, x, y)
    jax.block_until_ready(state)
    return time.perf_counter() - t0, time.process_time() - c0


def process_setup(spec: RunSpec) -> None:
    """XLA's environment as the kit's Backend sets it, before JAX starts a backend (a kit Backend later in
    the process finds it in force and passes).

    The bench builds a fresh model, and so fresh jitted steps, for every side of every round: XLA's
    compilation cache, in a folder of this process's own, lets each round after the first load the same
    programs instead of compiling them again. Compilation is in the untimed warmup either way.
    """
    import atexit
    import shutil
    import tempfile

    xla_env.configure(spec)
    import jax

    if spec.device != "gpu":
        jax.config.update("jax_platforms", "cpu")
    cache = tempfile.mkdtemp(prefix="reprokit-xla-cache-")
    atexit.register(shutil.rmtree, cache, True)
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

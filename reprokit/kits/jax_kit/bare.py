"""The bench's bare JAX loop, the reference the kit's own loop is judged against (reprokit/kits/bench.py).

The fastest idiomatic loop: ``nnx.split`` once, one pure step under ``jax.jit`` with the whole train state
donated (parameters, BatchNorm statistics, dropout key, optimizer moments), no host read inside the loop.
Its batches are on the device before its clock starts, as the other bare loops' are. The first warmup
step compiles the step (the warmup is untimed, so compilation is never in the figure).

At N devices (a spec's ``devices``) the same step per device under ``jax.shard_map`` over a mesh of N devices, as
the kit runs it (reprokit/kits/jax_kit/sharded.py): the state replicated, each global batch split on the "data" axis,
the gradients and BatchNorm's running statistics averaged, each device's dropout keys folded with its index.
"""
from __future__ import annotations

import time
from functools import partial

from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.jax_kit import xla_env
from reprokit.kits.training_loop import bare


def loop(spec: RunSpec, arrays: datalib.Arrays, warmup: int, steps: int) -> tuple[float, float]:
    """Wall and process CPU seconds for `steps` steps after `warmup`."""
    import jax
    import jax.numpy as jnp
    import numpy as np
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

    def loss_fn(m: nnx.Module, x: jax.Array, y: jax.Array) -> jax.Array:
        logits = m(prepare(x))
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    def step(state: nnx.State, x: jax.Array, y: jax.Array) -> nnx.State:
        m, o = nnx.merge(graphdef, state)
        m.train()
        grads = nnx.grad(loss_fn)(m, x, y)
        o.update(m, grads)
        return nnx.state((m, o))

    def device_step(state: nnx.State, x: jax.Array, y: jax.Array) -> nnx.State:
        m, o = nnx.merge(graphdef, state)
        m.train()
        # copies (the state holds the variables): the keys and parameters are put back after the step's own
        keys, params = (jax.tree.map(lambda v: v, nnx.state(m, kind)) for kind in (nnx.RngKey, nnx.Param))
        nnx.update(m, jax.tree.map(lambda k: jax.random.fold_in(k, jax.lax.axis_index("data")), keys))
        nnx.update(m, jax.lax.pcast(params, "data", to="varying"))       # each device's own gradients
        grads = nnx.grad(loss_fn)(m, x, y)
        nnx.update(m, params)
        o.update(m, jax.lax.pmean(grads, "data"))
        nnx.update(m, keys)
        nnx.update(m, jax.lax.pmean(nnx.state(m, nnx.BatchStat), "data"))
        return nnx.state((m, o))

    put = jax.device_put
    if spec.devices > 1:
        from jax.sharding import Mesh, NamedSharding
        from jax.sharding import PartitionSpec as P
        mesh = Mesh(np.array(jax.devices("gpu" if spec.device == "gpu" else "cpu")[:spec.devices]), ("data",))
        replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
        state = jax.device_put(state, replicated)
        train = jax.jit(jax.shard_map(device_step, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=P()),
                        donate_argnums=0, in_shardings=(replicated, split, split), out_shardings=replicated)
        put = partial(jax.device_put, device=split)
    else:
        train = jax.jit(step, donate_argnums=0)
    staged = [(put(arrays.x_train[idx]), put(arrays.y_train[idx]))
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

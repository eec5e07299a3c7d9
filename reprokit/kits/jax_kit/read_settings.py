"""The settings JAX reports at run time, under reprokit/kits/contract/settings.py's keys (docs/settings.md).

JAX has a call to read some of them (its config, the jitted step, the parameters' dtype). XLA's own
switches (threads, autotuning, determinism) are environment variables XLA reads at its start and
offers no call to read back: those readings are of the process's XLA_FLAGS as XLA started with them,
a declared reproduction of what the kit set, and each source says so.
"""
from __future__ import annotations

import os
from typing import Any

import jax
from flax import nnx

from reprokit.kits.contract import settings as settings_lib

read = settings_lib.read
FROM_FLAGS = "XLA_FLAGS as XLA started (XLA has no call that reads it back: a declared reproduction)"
NO_PINNING = settings_lib.not_reported("JAX has no pinned-memory switch: jax.device_put stages host copies itself")


def xla_flag(name: str) -> str | None:
    """One flag's value in the process's XLA_FLAGS ("--name=value" or "name=value"), None where unset."""
    found = None
    for item in os.environ.get("XLA_FLAGS", "").split():
        key, _, value = item.lstrip("-").partition("=")
        if key == name:
            found = value
    return found


def _tf32(gpu: bool) -> dict[str, Any]:
    precision = jax.config.values["jax_default_matmul_precision"]
    if not gpu:
        return read(False, f"jax_default_matmul_precision {precision!r}: XLA's CPU dots and convolutions are "
                           f"float32 at every precision")
    if precision is None:
        return read(True, "jax_default_matmul_precision unset: XLA's DEFAULT precision, TF32 on GPUs that have it")
    return read(str(precision) not in ("highest", "float32", "HIGHEST"),
                f"jax_default_matmul_precision {precision!r}: one switch for dots and convolutions")


def intra_op_threads() -> int:
    """One where XLA_FLAGS turn Eigen's pool off, else every CPU this process may run on (XLA's default)."""
    return 1 if xla_flag("xla_cpu_multi_thread_eigen") == "false" else len(os.sched_getaffinity(0))


def _intra_op() -> dict[str, Any]:
    if xla_flag("xla_cpu_multi_thread_eigen") == "false":
        return read(1, f"--xla_cpu_multi_thread_eigen=false: Eigen's matmuls and convolutions on the calling "
                       f"thread; {FROM_FLAGS}")
    return read(intra_op_threads(), "XLA_FLAGS sets no thread count: XLA's CPU pool has one thread per CPU this "
                                    "process may use (os.sched_getaffinity; XLA has no call that reads it back)")


def framework_settings(gpu: bool) -> dict[str, dict[str, Any]]:
    """The settings JAX and XLA report now, that need no model."""
    tf32 = _tf32(gpu)
    autotune = xla_flag("xla_gpu_autotune_level")
    deterministic = xla_flag("xla_gpu_deterministic_ops")
    det = (read(deterministic in ("true", "1"), f"--xla_gpu_deterministic_ops={deterministic}, {FROM_FLAGS}")
           if deterministic is not None else
           read(not gpu, "XLA's CPU backend runs the same kernels in the same order every time" if not gpu else
                "--xla_gpu_deterministic_ops unset in XLA_FLAGS: XLA's default, off"))
    no_gpu = "no GPU: XLA's GPU allocator is not used"
    preallocate = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")
    return {
        "tf32.matmul": tf32, "tf32.convolution": tf32,
        "cudnn_autotune": (read(autotune != "0", f"--xla_gpu_autotune_level={autotune}, {FROM_FLAGS}")
                           if autotune is not None else
                           read(True, "--xla_gpu_autotune_level unset in XLA_FLAGS: XLA's default, 4, autotunes")
                           if gpu else settings_lib.not_reported("no GPU: XLA autotunes only its GPU kernels")),
        "determinism.ops": det, "determinism.cudnn": det,
        "allocator.growth": (read(preallocate == "false", f"XLA_PYTHON_CLIENT_PREALLOCATE={preallocate!r} as the "
                                  f"process started XLA (unset or true: 75% of the GPU taken at the start)")
                             if gpu else settings_lib.not_reported(no_gpu)),
        "allocator.config": settings_lib.allocator_config("jax"),
        "threads.intra_op": _intra_op(),
        "threads.inter_op": settings_lib.not_reported("XLA has no inter-op thread pool to set or read: it runs "
                                                      "one compiled program per step"),
    }


def model_settings(model: nnx.Module, step: Any, compute_dtype: str) -> dict[str, dict[str, Any]]:
    """What the training step runs as: jax.jit or not, the parameters' and the compute dtype, the layout."""
    jitted = hasattr(step, "lower")           # what jax.jit returns: it can be lowered to XLA
    params = jax.tree.leaves(nnx.state(model, nnx.Param))
    variables = str(params[0].dtype) if params else "float32"
    convs = [m for _, m in nnx.iter_graph(model) if isinstance(m, nnx.Conv)]
    layout = (settings_lib.layout(True, "flax.nnx.Conv: NHWC inputs, (kh, kw, in, out) kernels (XLA picks the "
                                        "device's own layout inside the compiled step)")
              if convs else settings_lib.layout(None, "the model has no flax.nnx.Conv"))
    return {"execution": read("jax.jit (XLA)" if jitted else "eager",
                              "the training step's type (jax.jit returns a function that lowers to XLA)"),
            "precision": settings_lib.precision(compute_dtype, variables, "the dtype the jitted step casts the "
                                                "inputs to, and the parameters' dtype"),
            "data_layout": layout}

"""The environment XLA reads once, when JAX first starts a backend: set here from the spec, before that.

Standard library only, so a process can call ``configure`` before it imports jax (the kit's Backend,
the bench's process set-up). XLA keeps what it read at its start: a second call in the same process
(the bench builds a Backend per round, the certificate two) may ask only for what is in force.
"""
from __future__ import annotations

import os
import sys

from reprokit.kits.contract.spec import FRAMEWORK_DEFAULT, RunSpec

# JAX takes 75% of a GPU's memory at its start unless told otherwise: then no peak would mean anything.
ALLOCATOR = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


class XlaStarted(RuntimeError):
    """JAX started with other XLA settings than this spec asks for (they cannot change in a process)."""


def flags(spec: RunSpec) -> list[str]:
    """The XLA_FLAGS this spec asks for (the process's own XLA_FLAGS are kept before them).

    XLA's CPU backend takes one thread count only: one (Eigen's matmuls and convolutions on the calling
    thread) or every CPU the process may run on, its default. ``intra_op_parallelism_threads=N``, a
    recipe often seen, is no XLA flag: XLA skips a word without "--" (and takes a first one for a file).
    """
    numerics = spec.numerics
    threads = numerics.cpu_threads.intra()
    cpus = len(os.sched_getaffinity(0))
    if threads not in (1, cpus):
        raise ValueError(f"numerics.cpu_threads.intra_op = {numerics.cpu_threads.intra_op}: XLA's CPU backend runs "
                         f"on one thread or on every CPU this process may use ({cpus}), nothing between; ask for 1 "
                         f"or \"auto\", or run without jax in --frameworks")
    out = ["--xla_cpu_multi_thread_eigen=false"] if threads == 1 else []
    if spec.device == "gpu" and numerics.cudnn_autotune != FRAMEWORK_DEFAULT and not numerics.cudnn_autotune:
        out.append("--xla_gpu_autotune_level=0")                 # XLA's default, 4, autotunes cuDNN and GEMMs
    return out


def wanted(spec: RunSpec) -> dict[str, str]:
    """Every environment variable this spec sets for XLA."""
    base = [f for f in os.environ.get("XLA_FLAGS", "").split() if f not in flags(spec)]
    env = {**ALLOCATOR, "XLA_FLAGS": " ".join(base + flags(spec))}
    if spec.device != "gpu":
        env["JAX_PLATFORMS"] = "cpu"          # a CPU run never initialises a GPU it may find
    return env


def configure(spec: RunSpec) -> dict[str, str]:
    """Set the spec's XLA environment before jax starts; where it has started, refuse a different one."""
    env = wanted(spec)
    if "jax" in sys.modules and started():
        differs = {k: v for k, v in env.items() if k != "XLA_FLAGS" and os.environ.get(k) != v}
        missing = [f for f in flags(spec) if f not in os.environ.get("XLA_FLAGS", "").split()]
        if differs or missing:
            raise XlaStarted(f"JAX already started in this process with other XLA settings ({differs or missing}); "
                             f"run this spec in a process of its own")
        return env
    os.environ.update(env)
    return env


def started() -> bool:
    """Has jax initialised a backend (after which XLA_FLAGS are read)?"""
    from jax._src import xla_bridge  # only looked at where jax is already imported

    return bool(getattr(xla_bridge, "_backends", None))

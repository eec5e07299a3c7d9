"""N stand-in devices for a run on a CPU, each framework's own, set before the script's first line.

- TensorFlow: N logical CPU devices (tf.config.set_logical_device_configuration). They must be set before
  TensorFlow's runtime starts, which the probe's own set-up does (a variable of its counters), so they are set
  here, before the probe is built. ``tf.distribute.MirroredStrategy()`` without devices then mirrors them:
  where TensorFlow sees no GPU it takes every logical CPU device, so a script that asks for all devices gets N.
- JAX: the host platform's device count (XLA_FLAGS=--xla_force_host_platform_device_count=N), which XLA reads
  once, when JAX starts its CPU backend: set before JAX is imported. ``jax.devices()`` and a mesh over them
  then hold N devices.
- PyTorch: N ranks on the gloo backend, which the script's own launcher starts (its WORLD_SIZE is the
  launcher's); nothing is set in this process.

Stand-in devices share the CPUs of one process, so their scaling says nothing about GPUs: every declaration
says so. One device (the default) and any run on a GPU set nothing and declare nothing.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from reprokit.kits.devices import no_gpu

HOST_DEVICE_COUNT = "--xla_force_host_platform_device_count"


class StandInsRefused(RuntimeError):
    """The run's stand-in devices cannot be set as the spec asks (one sentence)."""


def _shared(n: int) -> str:
    cpus = len(os.sched_getaffinity(0))
    return (f"the {n} stand-in devices share this process's {cpus} CPU{'s' if cpus != 1 else ''}, so their scaling "
            f"says nothing about GPUs")


def _tensorflow(n: int) -> str:
    import tensorflow as tf
    (cpu,) = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError as exc:         # the runtime started already: its devices are fixed (the bench's next round)
        if len(tf.config.list_logical_devices("CPU")) == n:
            return _said_tensorflow(n)
        raise StandInsRefused(f"TensorFlow started before its {n} stand-in devices could be set ({exc}); the probe "
                              f"sets them before the script's first line") from None
    return _said_tensorflow(n)


def _said_tensorflow(n: int) -> str:
    return (f"{n} stand-in devices: {n} logical CPU devices (tf.config.set_logical_device_configuration), set before "
            f"the script's first line; tf.distribute.MirroredStrategy() without devices mirrors them (where "
            f"TensorFlow sees no GPU it takes every logical CPU device); {_shared(n)}")


def _jax(n: int) -> str:
    if "jax" in sys.modules:
        from jax._src import xla_bridge  # only looked at where jax is imported already
        if getattr(xla_bridge, "_backends", None):
            import jax
            if jax.default_backend() == "cpu" and jax.device_count() == n:      # set already (the bench's next round)
                return _said_jax(n)
            raise StandInsRefused(f"JAX started before its {n} stand-in devices could be set; XLA reads "
                                  f"{HOST_DEVICE_COUNT} once, when JAX starts")
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(HOST_DEVICE_COUNT)]
    os.environ["XLA_FLAGS"] = " ".join([*kept, f"{HOST_DEVICE_COUNT}={n}"])
    return _said_jax(n)


def _said_jax(n: int) -> str:
    return (f"{n} stand-in devices: the host platform's {n} CPU devices (XLA_FLAGS={HOST_DEVICE_COUNT}={n}, set "
            f"before JAX starts), which jax.devices() and a mesh over them hold; {_shared(n)}")


def _pytorch(n: int) -> str:
    return (f"{n} stand-in devices: {n} ranks on the gloo backend, started by the script's launcher (by torchrun for "
            f"the kit's own run); {_shared(n)}")


STAND_INS = {"tensorflow": _tensorflow, "jax": _jax, "pytorch": _pytorch}


def before_import(framework: str, n: int, device: str) -> list[str]:
    """Set the run's N stand-in devices before the probe starts the framework; their declaration. Nothing on a
    GPU (the runner gave the process its GPUs) or at one device."""
    if device == "gpu" or n == 1:
        return []
    if framework not in STAND_INS:
        raise StandInsRefused(f"{framework} has no stand-in devices on a CPU: run it with one device (--devices 1), "
                              f"or on a host with {n} GPUs")
    return [STAND_INS[framework](n)]


def after_import(framework: str, device: str, script_dir: Path) -> list[str]:
    """Once the probe has imported the framework, before the script's first line: on a run without a GPU, the
    calls that ask for CUDA or NCCL stopped where the script makes them (reprokit/kits/devices/no_gpu.py); declared."""
    return no_gpu.install(framework, script_dir) if device != "gpu" else []

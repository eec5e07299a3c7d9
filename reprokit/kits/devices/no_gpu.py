"""A script that asks for CUDA or NCCL on a run without a GPU fails at that call, naming its file and line.

Without this, each framework answers in its own way, and none names the script's line: PyTorch raises from deep
inside its CUDA start ("Found no NVIDIA driver on your system"), TensorFlow quietly places a ``tf.device('/GPU:0')``
block on the CPU (soft placement), JAX names an unknown backend. On a run whose spec device is the CPU the probe
stops the call itself, before the script's first step if that is where the script asks, in one sentence with the
script's file and line and the way out:
- PyTorch: anything that starts CUDA (``model.cuda()``, ``.to("cuda")``, a tensor made on ``torch.device("cuda")``,
  ``torch.cuda.synchronize()``), all through ``torch.cuda._lazy_init``; and ``init_process_group`` or
  ``new_group`` with the NCCL backend;
- TensorFlow: ``tf.device`` of a GPU, and ``tf.distribute.NcclAllReduce``;
- JAX: ``jax.devices`` and ``jax.local_devices`` of a GPU backend.
The line is the script's own: the innermost frame outside the framework's and the kit's files, which must be in
the script's folder (as the probe counts host syncs). A library that asks on its own (one that tries CUDA inside
a ``try``) is left to the framework's answer.
"""
from __future__ import annotations

import functools
import linecache
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import reprokit.kits

KITS_DIR = os.path.dirname(reprokit.kits.__file__)
GPU_BACKENDS = ("gpu", "cuda", "rocm")


class NoGpuOnThisRun(RuntimeError):
    """The script asked for a GPU (CUDA, NCCL, a GPU device) on a run that has none (one sentence)."""


def _packages(*modules: Any) -> tuple[str, ...]:
    return tuple(os.path.dirname(m.__file__) + os.sep for m in modules)


def script_line(script_dir: Path, skipped: tuple[str, ...]) -> tuple[str, int] | None:
    """(file relative to the script's folder, line) of the innermost frame outside ``skipped`` (the framework's
    packages) and the kit, where that frame is the script's own; None where a library made the call."""
    frame = sys._getframe(1)
    inside = (*skipped, KITS_DIR + os.sep)
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        frame = frame.f_back
    if frame is None or not frame.f_code.co_filename.startswith(str(script_dir) + os.sep):
        return None
    return os.path.relpath(frame.f_code.co_filename, script_dir), frame.f_lineno


def refusal(where: tuple[str, int], asks: str, way_out: str, script_dir: Path) -> NoGpuOnThisRun:
    file, line = where
    code = linecache.getline(str(script_dir / file), line).strip()
    shown = f" (`{code}`)" if code else ""
    return NoGpuOnThisRun(f"{file}, line {line}{shown}, asks for {asks}, and this run has no GPU (its device is the "
                          f"CPU: --gpus none, or a host without one); run it on a GPU host, or {way_out}.")


def _guard(real: Callable[..., Any], asks_gpu: Callable[..., str | None], way_out: str, script_dir: Path,
           skipped: tuple[str, ...]) -> Callable[..., Any]:
    """``real`` behind a check: where ``asks_gpu(*args, **kwargs)`` names what the call asks for and the call is
    the script's own, the refusal; else the call as it was."""
    @functools.wraps(real)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        asks = asks_gpu(*args, **kwargs)
        if asks and (where := script_line(script_dir, skipped)):
            raise refusal(where, asks, way_out, script_dir)
        return real(*args, **kwargs)
    return guarded


def asks_nccl(backend: Any = None, *args: Any, **kwargs: Any) -> str | None:
    """NCCL for the CPU: "nccl" alone, or a device map that gives it the CPU ("cpu:gloo,cuda:nccl" does not)."""
    text = str(backend).lower().replace(" ", "") if backend is not None else ""
    return "the NCCL backend" if text == "nccl" or "cpu:nccl" in text.split(",") else None


def _pytorch(script_dir: Path) -> list[str]:
    import torch
    import torch.distributed as dist
    skipped = _packages(torch)
    torch.cuda._lazy_init = _guard(torch.cuda._lazy_init, lambda: "CUDA",
                                   "let it choose its device: torch.device(\"cuda\" if torch.cuda.is_available() else "
                                   "\"cpu\")", script_dir, skipped)
    if dist.is_available():
        from torch.distributed import distributed_c10d
        way_out = 'use the gloo backend on a CPU (or "cpu:gloo,cuda:nccl", which picks each by device)'
        for module in (dist, distributed_c10d):
            module.init_process_group = _guard(distributed_c10d.init_process_group, asks_nccl, way_out, script_dir,
                                               skipped)
            module.new_group = _guard(distributed_c10d.new_group, asks_nccl, way_out, script_dir, skipped)
    return ["on this run without a GPU, a call of the script's that starts CUDA (model.cuda(), .to(\"cuda\"), a "
            "tensor on torch.device(\"cuda\")) or asks for NCCL (init_process_group, new_group) is stopped there, "
            "naming its file and line"]


def _gpu_device(name: Any = None, *args: Any, **kwargs: Any) -> str | None:
    import tensorflow as tf
    try:
        spec = name if isinstance(name, tf.DeviceSpec) else tf.DeviceSpec.from_string(name) \
            if isinstance(name, str) else None
    except ValueError:                  # not a device name: TensorFlow's own error
        return None
    return f"the device {name!r}" if spec is not None and (spec.device_type or "").upper() == "GPU" else None


def _tensorflow(script_dir: Path) -> list[str]:
    import keras
    import tensorflow as tf
    skipped = _packages(tf, keras)
    tf.device = _guard(tf.device, _gpu_device, "leave the placement to TensorFlow (no tf.device), or name "
                       "'/CPU:0'", script_dir, skipped)
    nccl = tf.distribute.NcclAllReduce
    nccl.__init__ = _guard(nccl.__init__, lambda *a, **k: "NCCL (tf.distribute.NcclAllReduce)",
                           "leave cross_device_ops to the strategy, which picks one for the devices it has",
                           script_dir, skipped)
    return ["on this run without a GPU, the script's tf.device of a GPU and its tf.distribute.NcclAllReduce are "
            "stopped there, naming its file and line (TensorFlow would place the block on the CPU unsaid)"]


def _gpu_backend(backend: Any = None, *args: Any, **kwargs: Any) -> str | None:
    return f"the {backend!r} backend" if isinstance(backend, str) and backend.lower() in GPU_BACKENDS else None


def _jax(script_dir: Path) -> list[str]:
    import jax
    import jaxlib
    skipped = _packages(jax, jaxlib)
    way_out = "ask for jax.devices() without a backend, which gives the run's own devices"
    jax.devices = _guard(jax.devices, _gpu_backend, way_out, script_dir, skipped)
    jax.local_devices = _guard(jax.local_devices, lambda process_index=None, backend=None, *a, **k:
                               _gpu_backend(backend), way_out, script_dir, skipped)
    return ["on this run without a GPU, the script's jax.devices and jax.local_devices of a GPU backend are stopped "
            "there, naming its file and line"]


GUARDS = {"pytorch": _pytorch, "tensorflow": _tensorflow, "jax": _jax}


def install(framework: str, script_dir: Path) -> list[str]:
    """The guards of the run's framework (none for a framework without them); their declaration."""
    guard = GUARDS.get(framework)
    return guard(script_dir) if guard else []

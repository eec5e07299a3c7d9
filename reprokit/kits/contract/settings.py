"""The effective settings a run reports, under stable keys, whatever the framework (docs/settings.md).

Each framework's kit and probe read these from the framework at run time into ``environment.settings``:
``{key: {"value": ..., "source": where it was read}}``, or ``{"value": None, "not_reported": why}`` where
the framework has no such setting. The report sets them side by side (reprokit/report/settings_table.py).
Framework-free: the kits and the host import the same keys.
"""
from __future__ import annotations

import os
from typing import Any

# key -> (what it is, in words; whether it acts only on a GPU)
KEYS: dict[str, tuple[str, bool]] = {
    "tf32.matmul": ("TF32 for matmuls", True),
    "tf32.convolution": ("TF32 for convolutions", True),
    "cudnn_autotune": ("cuDNN autotuning", True),
    "determinism.ops": ("deterministic algorithms", False),
    "determinism.cudnn": ("deterministic cuDNN", True),
    "execution": ("execution", False),
    "precision": ("mixed-precision policy", False),
    "allocator.growth": ("GPU memory grows on demand", True),
    "allocator.config": ("allocator configuration", True),
    "threads.intra_op": ("intra-op threads", False),
    "threads.inter_op": ("inter-op threads", False),
    "loader.workers": ("loader workers", False),
    "loader.prefetch": ("batches prefetched", False),
    "loader.pin_memory": ("pinned host memory", True),
    "data_layout": ("data layout", False),
}

# Pitfalls that change a setting declare it (a declaration key, as in [[differences]]: a key or its prefix).
PITFALL_SETTINGS: dict[str, tuple[str, ...]] = {
    "pt_blocking_copy": ("loader.pin_memory",),
    "pt_cpu_resize_dataloader": ("loader",),
    "tf_batch_of_one": ("loader",),
}

# Environment variables the frameworks' allocators read, by framework (JAX's for a registered JAX kit).
ALLOCATOR_ENV = {
    "pytorch": ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"),
    "tensorflow": ("TF_GPU_ALLOCATOR", "TF_FORCE_GPU_ALLOW_GROWTH"),
    "jax": ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR"),
}


def read(value: Any, source: str) -> dict[str, Any]:
    return {"value": value, "source": source}


def not_reported(why: str) -> dict[str, Any]:
    return {"value": None, "not_reported": why}


def declares(key: str, setting: str) -> bool:
    """A declaration key names a setting or a group of them ("tf32" declares tf32.matmul and tf32.convolution)."""
    return setting == key or setting.startswith(key + ".")


def allocator_config(framework: str) -> dict[str, Any]:
    """The allocator's environment variables as this process sees them: "default" where none is set."""
    names = ALLOCATOR_ENV.get(framework, ())
    found = [f"{n}={os.environ[n]}" for n in names if n in os.environ]
    return read("; ".join(found) or "default", f"the process's environment ({', '.join(names)})")


def layout(channels_last: bool | None, source: str) -> dict[str, Any]:
    """A convolution's data layout in memory: NHWC (channels last) or NCHW."""
    if channels_last is None:
        return not_reported(source)
    return read("NHWC" if channels_last else "NCHW", source)


def precision(compute: str, variables: str, source: str) -> dict[str, Any]:
    return read(f"{compute} compute, {variables} variables", source)


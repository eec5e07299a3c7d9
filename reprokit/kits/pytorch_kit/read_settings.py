"""The settings torch reports at run time, under reprokit/kits/contract/settings.py's keys (docs/settings.md).

Apart from the Backend so that the probe reads them too without importing the kit's pitfalls.
"""
from __future__ import annotations

import torch

from reprokit.kits.contract import settings as settings_lib


def framework_settings() -> dict:
    """The settings torch reports now, that need no model (docs/settings.md)."""
    read = settings_lib.read
    precision = torch.get_float32_matmul_precision()
    matmul = f"torch.backends.cuda.matmul.allow_tf32 (float32 matmul precision {precision!r})"
    return {
        "tf32.matmul": read(torch.backends.cuda.matmul.allow_tf32, matmul),
        "tf32.convolution": read(torch.backends.cudnn.allow_tf32, "torch.backends.cudnn.allow_tf32"),
        "cudnn_autotune": read(torch.backends.cudnn.benchmark, "torch.backends.cudnn.benchmark"),
        "determinism.ops": read(torch.are_deterministic_algorithms_enabled(),
                                "torch.are_deterministic_algorithms_enabled()"),
        "determinism.cudnn": read(torch.backends.cudnn.deterministic, "torch.backends.cudnn.deterministic"),
        "allocator.growth": read(True, "torch's caching allocator never preallocates: it reserves as tensors need "
                                       "memory (no switch to read)"),
        "allocator.config": settings_lib.allocator_config("pytorch"),
        "threads.intra_op": read(torch.get_num_threads(), "torch.get_num_threads()"),
        "threads.inter_op": read(torch.get_num_interop_threads(), "torch.get_num_interop_threads()"),
    }


def model_settings(model: torch.nn.Module, inputs: torch.Tensor | None, device_type: str) -> dict:
    """What a training step runs as, read inside it: torch.compile or eager, the convolutions' memory format,
    autocast and the parameters' dtype."""
    compiled = type(model).__name__ == "OptimizedModule"          # what torch.compile(model) returns
    conv = next((m for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)), None)
    params = next(model.parameters(), None)
    variables = str(params.dtype).split(".")[-1] if params is not None else "float32"
    autocast = torch.is_autocast_enabled(device_type)
    compute = str(torch.get_autocast_dtype(device_type)).split(".")[-1] if autocast else variables
    out = {"execution": settings_lib.read("torch.compile" if compiled else "eager",
                                          "the trained module's type (torch.compile returns an OptimizedModule)"),
           "precision": settings_lib.precision(compute, variables, f"torch.is_autocast_enabled({device_type!r}) in "
                                               f"the training step, and the parameters' dtype")}
    if conv is None:
        out["data_layout"] = settings_lib.layout(None, "the model has no convolution")
        return out
    last = [_channels_last(t) for t in (conv.weight, inputs) if t is not None and t.dim() == 4]
    formats = ", ".join("channels_last" if c else "contiguous" for c in last)
    out["data_layout"] = settings_lib.layout(any(last), f"the memory format of the first convolution's weight and "
                                             f"of the batch ({formats}): either channels_last runs it NHWC")
    return out


def _channels_last(t: torch.Tensor) -> bool:
    return t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()

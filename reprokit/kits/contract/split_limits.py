"""What the kits cannot train at more than one device (reprokit/kits/training_loop/distributed.py): the runs whose
batches are not the kit's to split, and TensorFlow's XLA compile of a mirrored step. The plan leaves such a run out
before any run, saying why (reprokit/plan/plan.py runnable_at_n); the kits refuse the same at run time
(pytorch_kit/ddp.py, tensorflow_kit/mirrored.py, jax_kit/sharded.py). Standard library only: the host reads it.
"""
from __future__ import annotations

from typing import Any


def not_at_n(spec: dict[str, Any]) -> str | None:
    """Why a kit cannot train this RunSpec (its JSON form) at more than one device, in words; None where it can."""
    fw, pitfalls = spec["framework"], set(spec["pitfalls"])
    if ((spec.get("hooks") or {}).get("input") or {}).get(fw):
        return "the user's input hook feeds batches of its own, which the kit would not split among the devices"
    if fw == "pytorch" and "pt_cpu_resize_dataloader" in pitfalls:
        return "the posted DataLoader feeds batches of its own, which DDP would not split among the ranks"
    if fw == "tensorflow" and "tf_batch_of_one" in pitfalls:
        return "the posted batches of one cannot be split among devices"
    if fw == "tensorflow" and spec["numerics"]["compile"]:
        return "XLA cannot compile a MirroredStrategy step whose mirrored variables sit on several devices"
    return None

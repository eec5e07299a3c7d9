"""The kit's own runs at N devices (a spec's ``devices``): data parallelism as each framework documents it.

- PyTorch: N ranks under torchrun (reprokit/kits/ranks/kit_run.py), DDP (reprokit/kits/pytorch_kit/ddp.py), each
  rank its share of every global batch as ``DistributedSampler`` deals an epoch's order (rank r takes every N-th
  sample from r), the ranks' gradients averaged;
- TensorFlow: one process, ``MirroredStrategy`` over its N devices, the global batch split by
  ``experimental_distribute_dataset``, each replica's loss scaled by the global batch (``compute_average_loss``);
- JAX: one process, a mesh of its N devices, the global batch sharded on the mesh's data axis.

``spec.train.batch_size`` is the global batch at that count (the plan scales it for weak scaling), the same
samples in the same order at every count; each framework splits it among its devices its own way. BatchNorm keeps
each device's own statistics in all three (DDP's, MirroredStrategy's and a per-device step's default), so the
three models do the same work at N.

At its first training step each process leaves its evidence in the format the probe's ranks leave theirs
(reprokit/kits/ranks/certified.py), which the certificate at N compares (reprokit/kits/framework_free/rank_checks.py):
who it is, its batch, the devices it split it over, each sample's fingerprint, how its step scaled the loss, and its
BatchNorm. Standard library and numpy only.
"""
from __future__ import annotations

from typing import Any

import numpy as np

PER_DEVICE, SYNCHRONIZED = "per device", "synchronized"        # the probe's words (batchnorm_sync)


def shard(indices: np.ndarray, rank: int, world: int) -> np.ndarray:
    """Rank ``rank``'s share of one global batch: every ``world``-th sample from ``rank``, as DistributedSampler
    deals an epoch's order among the ranks (its k-th batch is then the k-th global batch's share)."""
    return indices[rank::world]


def fingerprints(x: np.ndarray) -> list[float]:
    """Each sample's fingerprint: the sum of its inputs, to 6 significant digits (as the probe's)."""
    sums = x.reshape(len(x), -1).sum(axis=1, dtype=np.float64)
    return [float(f"{v:.6g}") for v in sums]


def evidence(role: str, index: int, batch: int, replicas: int, samples: list[float], differentiated: float,
             own_mean: float, summed: int, averaged: bool, batchnorm: str | None, how: str) -> dict[str, Any]:
    """One process's evidence at its first training step.

    ``differentiated``: the loss its backward pass (each replica's) differentiated; ``own_mean``: the mean loss over
    that replica's own batch; ``summed``: the replicas whose gradients the update adds up (1 where they are
    averaged, as DDP's all-reduce and a pmean do). The step's gradient over one device's on the same global batch is
    their ratio times ``summed``."""
    ratio = differentiated / own_mean if own_mean else float("nan")
    return {"who": {"role": role, "index": index}, "batch": batch, "replicas": replicas, "samples": samples,
            "loss_scale": {"per_replica": ratio, "replicas_summed": summed, "factor": ratio * summed,
                           "how": how + ("; the devices' gradients averaged" if averaged else
                                         f"; the {summed} replicas' gradients summed")},
            "batchnorm": batchnorm}


"""A PyTorch kit run's rank at N devices: DDP as PyTorch documents it (reprokit/kits/training_loop/distributed.py).

torchrun starts N ranks of ``python -m reprokit.kits.run`` (reprokit/kits/ranks/kit_run.py); each joins
the process group (NCCL on GPUs, gloo on a CPU's stand-in devices), trains on its own device the share of each
global batch that DistributedSampler would deal it, and DDP averages the ranks' gradients in the backward pass.
Each rank writes a result of its own, which the launcher gathers into the run's.
"""
from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.training_loop import distributed


class Ranks:
    """This rank's place in the group, and what its steps showed."""

    def __init__(self, spec: RunSpec) -> None:
        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if self.world != spec.devices:
            raise RuntimeError(f"torchrun started {self.world} ranks for a run at {spec.devices} devices")
        local = int(os.environ.get("LOCAL_RANK", self.rank))
        if spec.device == "gpu" and torch.cuda.is_available():
            if torch.cuda.device_count() <= local:
                raise RuntimeError(f"rank {self.rank} has no GPU of its own: the run at {spec.devices} devices sees "
                                   f"{torch.cuda.device_count()} GPU(s)")
            torch.cuda.set_device(local)
            self.device, backend = torch.device("cuda", local), "nccl"
        else:
            self.device, backend = torch.device("cpu"), "gloo"
        if not dist.is_initialized():        # the bench runs the kit again and again in one rank
            dist.init_process_group(backend)
        self.backend = backend
        share_cpus(spec, self.world)
        self.global_batch = spec.train.batch_size
        self.share = (self.rank, self.world)
        self._evidence: dict[str, Any] | None = None
        self._batchnorm: str | None = None

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model under DDP: its parameters broadcast from rank 0, its gradients averaged over the ranks."""
        norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        synced = sum(isinstance(m, torch.nn.SyncBatchNorm) for m in norms)
        self._batchnorm = (None if not norms else distributed.SYNCHRONIZED if synced == len(norms)
                           else distributed.PER_DEVICE if not synced else "mixed")
        ids = [self.device.index] if self.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def first_step(self, x: torch.Tensor, outputs: torch.Tensor, y: torch.Tensor, loss: torch.Tensor) -> None:
        """Once, at the first training step (in the warmup): the evidence the certificate at N compares."""
        if self._evidence is not None:
            return
        with torch.no_grad():
            own = float(F.cross_entropy(outputs.detach().float(), y))
        self._evidence = distributed.evidence(
            "rank", self.rank, int(x.shape[0]), 1, distributed.fingerprints(x.detach().cpu().numpy()),
            float(loss.detach()), own, 1, True, self._batchnorm,
            "the loss its backward differentiated over its batch's mean loss")

    def at_n(self) -> dict[str, Any]:
        return {"how": f"DDP over {self.world} ranks ({self.backend}), each rank one sample in every {self.world} of "
                       f"each global batch of {self.global_batch} (DistributedSampler's split), the ranks' "
                       f"gradients averaged in the backward pass",
                "replicas": 1, "rank": self.rank, "ranks": self.world, "backend": self.backend,
                "evidence": [self._evidence] if self._evidence else []}


def share_cpus(spec: RunSpec, world: int) -> None:
    """On a CPU, "auto" threads are the CPUs the run holds, which its ranks share: each rank takes its part."""
    if spec.device != "gpu" and spec.numerics.cpu_threads.intra_op == "auto":
        torch.set_num_threads(max(1, spec.numerics.cpu_threads.intra() // world))


def refused(spec: RunSpec, hooks: list[str]) -> None:
    """What the kit's DDP run does not do, in one sentence: a user's input hook or a posted loader feeds its own
    batches, which the ranks would not split."""
    if hooks:
        raise RuntimeError(f"a run at {spec.devices} devices splits the kit's own batches among its ranks; "
                           f"{' and '.join(hooks)} feed(s) batches of its own, which DDP would not split: run it at "
                           f"one device")

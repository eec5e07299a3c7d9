"""The bench's bare PyTorch loop, the reference the kit's own loop is judged against (reprokit/kits/bench.py)."""
from __future__ import annotations

import time

from reprokit.kits.contract.spec import FRAMEWORK_DEFAULT, RunSpec
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.training_loop import bare, distributed


def loop(spec: RunSpec, arrays: datalib.Arrays, warmup: int, steps: int) -> tuple[float, float]:
    """Wall and process CPU seconds for `steps` steps after `warmup`: the plainest fast eager loop."""
    import torch
    import torch.nn.functional as F

    from reprokit.kits.pytorch_kit import ddp, models

    torch.manual_seed(spec.train.seed)
    ranks = spec.devices > 1                 # one of torchrun's ranks (reprokit/kits/bench.py): DDP, its share
    rank, world = (torch.distributed.get_rank(), torch.distributed.get_world_size()) if ranks else (0, 1)
    if ranks:
        ddp.share_cpus(spec, world)          # as the kit's ranks share them
    device = torch.device("cuda", rank if ranks else 0) if spec.device == "gpu" else torch.device("cpu")
    scale, resize = bare.scale_resize(spec)
    model: torch.nn.Module = models.build(spec.model, spec.data.input_size).to(device)
    if ranks:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                                          else None)
    model.train()
    opt = spec.train.optimizer
    if opt.name == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr, betas=(opt.beta1, opt.beta2),
                                     eps=opt.epsilon)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=opt.lr, momentum=opt.momentum,
                                    nesterov=opt.nesterov)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    # Every batch this loop takes, as tensors on the device before the clock starts: no numpy slicing or
    # conversion inside the timed steps (the kit slices and converts each batch inside its own).
    staged = [(torch.from_numpy(arrays.x_train[idx]).to(device), torch.from_numpy(arrays.y_train[idx]).to(device))
              for idx in (distributed.shard(i, rank, world) for i in bare.schedule(spec, arrays, warmup, steps))]
    sync()
    t0 = c0 = 0.0
    for i, (x, y) in enumerate(staged):
        if i == warmup:
            sync()
            t0, c0 = time.perf_counter(), time.process_time()
        x = x.permute(0, 3, 1, 2).float().mul_(scale).contiguous()
        if resize:
            x = F.interpolate(x, size=(resize, resize), mode="bilinear", align_corners=False, antialias=False)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    sync()
    return time.perf_counter() - t0, time.process_time() - c0


def process_setup(spec: RunSpec) -> None:
    """Thread pools as the kit sets them, once; later kit Backends may ask again for the same.

    torch refuses a second set_num_interop_threads in one process even with the
    same value; a kit runs once per process, the bench many times. Asking for
    the value already in force becomes a no-op here, any other value still fails.
    """
    import torch

    threads = spec.numerics.cpu_threads
    torch.set_num_threads(threads.intra())
    if threads.inter_op != FRAMEWORK_DEFAULT:
        torch.set_num_interop_threads(int(threads.inter_op))
    original = torch.set_num_interop_threads

    def same_or_fail(n: int) -> None:
        if n != torch.get_num_interop_threads():
            original(n)

    torch.set_num_interop_threads = same_or_fail

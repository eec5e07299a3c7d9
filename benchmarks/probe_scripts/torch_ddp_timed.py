"""Two ranks of DistributedDataParallel on gloo, started with torch.multiprocessing.spawn, each timing its own steps:
benchmarks/bench_probe.py runs it plain and under the probe and holds each rank's step against its plain twin's (the
quick profile's size of model, 16 samples per rank and step)."""
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def train(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)                    # two ranks on two cores
    steps, warmup, batch = int(os.environ.get("BENCH_STEPS", "60")), 5, 16
    torch.manual_seed(0)
    n = (steps + warmup) * batch * world
    data = torch.utils.data.TensorDataset(torch.rand(n, 3, 32, 32), torch.randint(0, 10, (n,)))
    loader = torch.utils.data.DataLoader(data, batch_size=batch, sampler=DistributedSampler(data, world, rank))
    model = DDP(nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                              nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                              nn.Dropout(0.1), nn.Linear(64, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    starts = []
    for i, (x, y) in enumerate(loader):
        if i == warmup:
            cpu = [time.process_time()]
        if i >= warmup:
            starts.append(time.perf_counter())
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    starts.append(time.perf_counter())
    cpu.append(time.process_time())
    # one write of the whole line: the two ranks share the pipe, and a write under its buffer's size stays whole
    os.write(1, ("BENCH " + json.dumps({"rank": rank, "steps": steps, "starts": starts, "cpu": cpu}) + "\n").encode())
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    mp.spawn(train, args=(2, free), nprocs=2)

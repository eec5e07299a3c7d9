"""A PyTorch tutorial-style script that times its own steps: a Dataset class, a DataLoader with 2 worker
processes and shuffling, the loop written as the tutorials write it. benchmarks/bench_probe.py runs it
plain and under the probe (the workers talk to it over Unix sockets, which the network guard lets through)."""
import json
import os
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.rand(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


if __name__ == "__main__":
    steps, warmup, batch = int(os.environ.get("BENCH_STEPS", "60")), 5, 64
    torch.manual_seed(0)
    loader = DataLoader(Images((steps + warmup) * batch), batch_size=batch, shuffle=True, num_workers=2,
                        persistent_workers=True)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Dropout(0.1), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    starts = []              # each timed step's start, by the script's own clock
    for i, (x, y) in enumerate(loader):
        if i == warmup:
            cpu = [time.process_time()]       # the process's CPU time (all its threads) at both ends only
        if i >= warmup:
            starts.append(time.perf_counter())
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    starts.append(time.perf_counter())
    cpu.append(time.process_time())
    model.eval()
    with torch.no_grad():
        for i, (x, y) in enumerate(loader):
            F.cross_entropy(model(x), y)
            if i == 1:
                break
    print("BENCH " + json.dumps({"steps": steps, "starts": starts, "cpu": cpu}), flush=True)

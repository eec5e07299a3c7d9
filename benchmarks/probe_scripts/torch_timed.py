"""A PyTorch training script that times its own steps: benchmarks/bench_probe.py runs it plain and under the
probe, every observation on, and holds the two against each other (the quick profile's size of model)."""
import json
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

steps, warmup, batch = int(os.environ.get("BENCH_STEPS", "60")), 5, 64
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.rand((steps + warmup) * batch, 3, 32, 32),
                                      torch.randint(0, 10, ((steps + warmup) * batch,)))
loader = torch.utils.data.DataLoader(data, batch_size=batch)
model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1),
                      nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.1), nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
model.train()
starts = []                  # each timed step's start, by the script's own clock
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
    for x, y in list(loader)[:2]:
        F.cross_entropy(model(x), y)
print("BENCH " + json.dumps({"steps": steps, "starts": starts, "cpu": cpu}), flush=True)

"""Trains one step, then ends its process with status 0 before anything could be written: no result file."""
import os

import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
optimizer.zero_grad()
model(torch.zeros(8, 4)).sum().backward()
optimizer.step()
os._exit(0)

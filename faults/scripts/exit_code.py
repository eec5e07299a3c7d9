"""Trains one step, then its process ends with status 3 at once: no exception, no result file."""
import os

import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
optimizer.zero_grad()
model(torch.zeros(8, 4)).sum().backward()
optimizer.step()
os._exit(3)

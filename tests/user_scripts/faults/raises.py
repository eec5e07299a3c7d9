"""Fails in its own code, after a training step."""
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
optimizer.zero_grad()
model(torch.zeros(8, 4)).sum().backward()
optimizer.step()
raise ValueError("the script's own bug")

"""Runs the model forward only: no optimizer step."""
import torch

model = torch.nn.Linear(4, 2)
with torch.no_grad():
    print(model(torch.zeros(8, 4)).sum())

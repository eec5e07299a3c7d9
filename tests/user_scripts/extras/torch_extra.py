"""Imports a package that the PyTorch lock does not hold (listed in its requirements file), then trains."""
import torch
from reprokit_probe_extra import WIDTH

model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, WIDTH), torch.nn.ReLU(),
                            torch.nn.Linear(WIDTH, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(20):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(torch.rand(8, 3, 32, 32)), torch.randint(0, 10, (8,))).backward()
    optimizer.step()

"""One optimizer steps two models, an encoder and a head, each run on its own."""
import torch
from torch import nn

encoder, head = nn.Linear(4, 8), nn.Linear(8, 2)
optimizer = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.1)
for _ in range(3):
    optimizer.zero_grad()
    head(encoder(torch.zeros(16, 4))).sum().backward()
    optimizer.step()

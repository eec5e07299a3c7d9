"""A user's model with BatchNorm; REPROKIT_TEST_BN_EPS, if set, changes its epsilon after construction."""
import os

import torch
import torchvision
from torch import nn
from torchvision import transforms

train = torchvision.datasets.CIFAR10("./data", train=True, transform=transforms.ToTensor(), download=True)
loader = torch.utils.data.DataLoader(train, batch_size=32, shuffle=True)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8, momentum=0.1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
if os.environ.get("REPROKIT_TEST_BN_EPS"):
    model[1].eps = float(os.environ["REPROKIT_TEST_BN_EPS"])
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for inputs, labels in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()

"""MNIST in PyTorch with a model that returns a dict, called with a keyword argument.

As the examples of models with auxiliary outputs do: ``forward(x, *, return_features=False)`` returns
``{"logits": ..., "features": ...}``, and the loss reads ``outputs["logits"]``.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torchvision import datasets, transforms


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16, eps=1e-5, momentum=0.1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(7 * 7 * 32, 10)

    def forward(self, x, *, return_features=False):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        features = F.max_pool2d(F.relu(self.conv2(x)), 2)
        out = {"logits": self.fc(torch.flatten(features, 1))}
        if return_features:
            out["features"] = features
        return out


def main():
    parser = argparse.ArgumentParser(description="MNIST, a model that returns a dict")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train = datasets.MNIST("../data", train=True, download=True, transform=transform)
    test = datasets.MNIST("../data", train=False, transform=transform)
    train_loader = torch.utils.data.DataLoader(train, batch_size=64, shuffle=True)
    test_loader = torch.utils.data.DataLoader(test, batch_size=1000)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(1, args.epochs + 1):
        model.train()
        for data, target in train_loader:
            optimizer.zero_grad()
            outputs = model(data, return_features=True)
            loss = F.cross_entropy(outputs["logits"], target)
            loss.backward()
            optimizer.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for data, target in test_loader:
                correct += (model(data)["logits"].argmax(1) == target).sum().item()
        print(f"epoch {epoch}: test accuracy {correct / len(test):.3f}")


if __name__ == "__main__":
    main()

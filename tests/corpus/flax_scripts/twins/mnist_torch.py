"""The Flax MNIST example's model written in PyTorch: the same CNN, SGD with momentum, batch 32."""
import torch
from torch import nn
from torchvision import datasets, transforms


class CNN(nn.Module):
    def __init__(self, bn_eps=1e-5):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(16, eps=bn_eps, momentum=0.1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.dense1 = nn.Linear(7 * 7 * 32, 64)
        self.dropout = nn.Dropout(0.25)
        self.dense2 = nn.Linear(64, 10)

    def forward(self, x):
        x = nn.functional.avg_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = nn.functional.avg_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = self.dropout(torch.relu(self.dense1(x)))
        return self.dense2(x)


def main(bn_eps=1e-5):
    train = datasets.MNIST("data", train=True, download=True, transform=transforms.ToTensor())
    test = datasets.MNIST("data", train=False, download=True, transform=transforms.ToTensor())
    train_loader = torch.utils.data.DataLoader(train, batch_size=32, shuffle=True, drop_last=True)
    test_loader = torch.utils.data.DataLoader(test, batch_size=32)
    model = CNN(bn_eps)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(1, 3):
        model.train()
        for images, labels in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for images, labels in test_loader:
                correct += (model(images).argmax(1) == labels).sum().item()
        print(f"epoch {epoch}: train loss {loss.item():.4f}, test accuracy {correct / len(test):.3f}")


if __name__ == "__main__":
    main()

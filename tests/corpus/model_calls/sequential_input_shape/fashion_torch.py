"""The Keras basic-classification tutorial's model in PyTorch: Flatten, Linear 128 with ReLU, Linear 10 (logits)."""
import torch
from torch import nn
from torchvision import datasets, transforms


def main(activation=nn.ReLU):
    train = datasets.FashionMNIST("data", train=True, download=True, transform=transforms.ToTensor())
    test = datasets.FashionMNIST("data", train=False, download=True, transform=transforms.ToTensor())
    train_loader = torch.utils.data.DataLoader(train, batch_size=32, shuffle=True)
    test_loader = torch.utils.data.DataLoader(test, batch_size=32)

    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 128), activation(), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)     # Keras's Adam
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(10):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in test_loader:
                correct += (model(x).argmax(1) == y).sum().item()
        print(f"epoch {epoch + 1}: test accuracy {correct / len(test):.3f}")


if __name__ == "__main__":
    main()

"""The planted script fixed: batch 32, no extra Dropout, validation under torch.no_grad(), no per-step sync."""
import torch
import torchvision
from torch import nn
from torchvision import transforms

trans = transforms.Compose([transforms.ToTensor()])
train = torchvision.datasets.CIFAR10("./data", train=True, transform=trans, download=True)
test = torchvision.datasets.CIFAR10("./data", train=False, transform=trans, download=True)
train_loader = torch.utils.data.DataLoader(train, batch_size=32, shuffle=True)
test_loader = torch.utils.data.DataLoader(test, batch_size=32)

model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(32, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
criterion = nn.CrossEntropyLoss()

for epoch in range(5):
    model.train()
    for inputs, labels in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(inputs), labels)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        total = sum(criterion(model(inputs), labels, ) for inputs, labels in test_loader)

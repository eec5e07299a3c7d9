"""A project's training script whose model lives in the project's own package named kits."""
import torch
import torchvision
from torchvision import transforms

from kits.model import SmallNet

trans = transforms.Compose([transforms.ToTensor()])
train = torchvision.datasets.CIFAR10("./data", train=True, transform=trans, download=True)
train_loader = torch.utils.data.DataLoader(train, batch_size=32, shuffle=True)

model = SmallNet(num_classes=10)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
criterion = torch.nn.CrossEntropyLoss()

for epoch in range(2):
    model.train()
    for inputs, labels in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(inputs), labels)
        loss.backward()
        optimizer.step()

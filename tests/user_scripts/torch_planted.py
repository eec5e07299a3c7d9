"""A user's PyTorch script, as people post them, with differences planted against its twin:
batch 16 where the Keras side uses 32, an extra Dropout, validation without torch.no_grad(),
loss.item() every step, and deterministic algorithms asked of torch alone. It reads CIFAR-10 through torchvision, which may download."""
import torch
import torchvision
from torch import nn
from torchvision import transforms

torch.use_deterministic_algorithms(True)          # "for reproducible runs": the Keras script asks nothing of the kind
trans = transforms.Compose([transforms.ToTensor()])
train = torchvision.datasets.CIFAR10("./data", train=True, transform=trans, download=True)
test = torchvision.datasets.CIFAR10("./data", train=False, transform=trans, download=True)
train_loader = torch.utils.data.DataLoader(train, batch_size=16, shuffle=True)
test_loader = torch.utils.data.DataLoader(test, batch_size=16)

model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Dropout(0.3), nn.Linear(32, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
criterion = nn.CrossEntropyLoss()

for epoch in range(5):
    model.train()
    running = 0.0
    for inputs, labels in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(inputs), labels)
        loss.backward()
        optimizer.step()
        running += loss.item()
    model.eval()
    val_loss = 0.0
    for inputs, labels in test_loader:            # no torch.no_grad(): a graph per batch
        val_loss += criterion(model(inputs), labels).item()
    print(f"epoch {epoch}: train {running:.3f} val {val_loss:.3f}")

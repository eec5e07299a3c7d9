"""A tutorial-style loop over DataLoaders (shuffled, 2 workers), evaluated each epoch; then a checkpoint
saved, a NEW model loaded from it and tested under inference_mode, and an accuracy per class that divides
by each class's count (a test pass over part of the sorted test set leaves classes at zero)."""
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import helpers


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.flatten(F.relu(self.conv(x)), 1))


torch.manual_seed(0)
(x_train, y_train), (x_test, y_test) = helpers.data()
train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=16, shuffle=True, num_workers=2,
                          generator=torch.Generator().manual_seed(1))
test_loader = DataLoader(TensorDataset(x_test, y_test), batch_size=20, num_workers=2)
net = Net()
optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

for epoch in range(1, 4):
    net.train()
    for inputs, labels in train_loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(net(inputs), labels)
        loss.backward()
        optimizer.step()
        helpers.log("train", epoch, inputs, labels, loss)
    net.eval()
    with torch.no_grad():
        for inputs, labels in test_loader:
            helpers.log("eval", epoch, inputs, labels, F.cross_entropy(net(inputs), labels))

torch.save(net.state_dict(), "net.pth")
net = Net()
net.load_state_dict(torch.load("net.pth", weights_only=True))
correct, total = [0] * 10, [0] * 10
with torch.inference_mode():
    for inputs, labels in test_loader:
        predicted = net(inputs).argmax(1)
        helpers.log("test", 0, inputs, labels)
        for label, guess in zip(labels.tolist(), predicted.tolist()):
            correct[label] += label == guess
            total[label] += 1
for c in range(10):
    print(f"class {c}: {100 * correct[c] / total[c]:.1f} %")

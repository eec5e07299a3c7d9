"""A hand-written loop: a DataLoader with a batch sampler of its own (shuffled indices, a short last batch),
driven by next() until StopIteration; then an evaluation of the same model under no_grad."""
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import helpers


class Batches(torch.utils.data.Sampler):
    def __init__(self, n, size, seed):
        self.n, self.size, self.g = n, size, torch.Generator().manual_seed(seed)

    def __iter__(self):
        order = torch.randperm(self.n, generator=self.g).tolist()
        return iter([order[i:i + self.size] for i in range(0, self.n, self.size)])

    def __len__(self):
        return -(-self.n // self.size)


torch.manual_seed(0)
(x_train, y_train), (x_test, y_test) = helpers.data(train=300)
train_loader = DataLoader(TensorDataset(x_train, y_train), batch_sampler=Batches(300, 32, seed=2))
model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 32), nn.ReLU(), nn.Linear(32, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

epoch = 0
while epoch < 3:
    epoch += 1
    batches = iter(train_loader)
    while True:
        try:
            inputs, labels = next(batches)
        except StopIteration:
            break
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        helpers.log("train", epoch, inputs, labels, loss)

model.eval()
with torch.no_grad():
    for inputs, labels in DataLoader(TensorDataset(x_test, y_test), batch_size=8):
        helpers.log("test", 0, inputs, labels, F.cross_entropy(model(inputs), labels))

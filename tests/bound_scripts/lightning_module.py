"""A LightningModule trained by a Trainer (as tests/corpus/trainers/lightning_mnist.py, through the older
``pytorch_lightning`` package, which the ``lightning`` requirement installs too) whose steps write down
what they received: for tests/test_trainers.py, which runs it under the probe unbounded and bounded. Each
record: [what, epoch, batch size, labels in order, first pixel, loss]; the file is the script's first argument.
No dropout: the shuffled loader's next order comes from the global generator, which dropout would draw from as
many times as steps ran (the bounded run fewer), so only the batches themselves would tell the runs apart."""
import json
import sys

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from torchvision import transforms
from torchvision.datasets import MNIST

pl.seed_everything(0)
records = []


class Recorded(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        return self.net(x)

    def _record(self, what, batch):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        records.append([what, self.current_epoch, len(y), y.tolist(), round(float(x[0, 0, 0, 0]), 6), loss.item()])
        return loss

    def training_step(self, batch, batch_idx):
        return self._record("fit", batch)

    def validation_step(self, batch, batch_idx):
        self._record("sanity" if self.trainer.sanity_checking else "validation", batch)

    def test_step(self, batch, batch_idx):
        self._record("test", batch)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


transform = transforms.ToTensor()
train = MNIST(".", train=True, download=True, transform=transform)
test = MNIST(".", train=False, download=True, transform=transform)
trainer = pl.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False)
model = Recorded()
trainer.fit(model, DataLoader(train, batch_size=32, shuffle=True), DataLoader(test, batch_size=20))
trainer.test(model, DataLoader(test, batch_size=50))
with open(sys.argv[1], "w") as fh:
    json.dump(records, fh)

"""Lightning's MNIST example's shape: a LightningModule (training_step, validation_step, test_step,
configure_optimizers), torchvision's MNIST split into training and validation, DataLoaders, a Trainer with
accelerator="auto", trainer.fit, then trainer.test on the best checkpoint. Lightning's progress bar, its
lightning_logs/ folder and its checkpoints are its own."""
import os

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, random_split
from torchvision import transforms
from torchvision.datasets import MNIST

PATH_DATASETS = os.environ.get("PATH_DATASETS", ".")
BATCH_SIZE = 64


class LitMNIST(L.LightningModule):
    def __init__(self, hidden_size=64, learning_rate=2e-4):
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(
            nn.Flatten(),
            nn.Linear(28 * 28, hidden_size),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden_size, 10),
        )

    def forward(self, x):
        return F.log_softmax(self.model(x), dim=1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.nll_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def _evaluate(self, batch, stage):
        x, y = batch
        logits = self(x)
        loss = F.nll_loss(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
        self.log(f"{stage}_loss", loss, prog_bar=True)
        self.log(f"{stage}_acc", acc, prog_bar=True)

    def validation_step(self, batch, batch_idx):
        self._evaluate(batch, "val")

    def test_step(self, batch, batch_idx):
        self._evaluate(batch, "test")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
mnist_full = MNIST(PATH_DATASETS, train=True, download=True, transform=transform)
mnist_train, mnist_val = random_split(mnist_full, [0.9, 0.1], generator=torch.Generator().manual_seed(42))
mnist_test = MNIST(PATH_DATASETS, train=False, download=True, transform=transform)

train_loader = DataLoader(mnist_train, batch_size=BATCH_SIZE, shuffle=True)
val_loader = DataLoader(mnist_val, batch_size=BATCH_SIZE)
test_loader = DataLoader(mnist_test, batch_size=BATCH_SIZE)

model = LitMNIST()
trainer = L.Trainer(accelerator="auto", devices=1, max_epochs=3)
trainer.fit(model, train_loader, val_loader)
trainer.test(dataloaders=test_loader, ckpt_path="best")

"""An MNIST classifier scaled with Lightning Fabric, run from the terminal with `fabric run`.

Run with:  fabric run train_fabric.py --accelerator=cpu --devices=2 --epochs=1

The options of `fabric run` (accelerator, strategy, devices) reach the script through the Fabric object it
creates, so the script itself names none: `fabric run` starts one process per device and Fabric joins them into
a process group. The script hands its model, optimizer and loaders to Fabric (setup, setup_dataloaders), calls
fabric.backward(loss) in place of loss.backward(), gathers the test loss from every process and saves the model
once, with fabric.save. (Under `fabric run` the processes already exist: fabric.launch() is for a script that
starts them itself, and refuses to run here.)
"""
import argparse

import torch
import torch.nn.functional as F
import torchvision.transforms as T
from lightning.fabric import Fabric, seed_everything
from torch import nn, optim
from torch.optim.lr_scheduler import StepLR
from torchmetrics.classification import Accuracy
from torchvision.datasets import MNIST


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1)
        self.conv2 = nn.Conv2d(16, 32, 3, 1)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(32 * 12 * 12, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(torch.flatten(x, 1))
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def run(hparams):
    # accelerator, strategy and devices come from the command line: see `fabric run --help`
    fabric = Fabric()
    seed_everything(hparams.seed)

    transform = T.Compose([T.ToTensor(), T.Normalize((0.1307,), (0.3081,))])
    # rank 0 downloads first, then every process reads the files
    with fabric.rank_zero_first(local=False):
        train_dataset = MNIST("data", download=fabric.is_global_zero, train=True, transform=transform)
        test_dataset = MNIST("data", download=fabric.is_global_zero, train=False, transform=transform)

    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=hparams.batch_size)
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=hparams.batch_size)
    train_loader, test_loader = fabric.setup_dataloaders(train_loader, test_loader)

    model = Net()
    optimizer = optim.Adadelta(model.parameters(), lr=hparams.lr)
    model, optimizer = fabric.setup(model, optimizer)
    scheduler = StepLR(optimizer, step_size=1, gamma=hparams.gamma)
    test_acc = Accuracy(task="multiclass", num_classes=10).to(fabric.device)

    for epoch in range(1, hparams.epochs + 1):
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            fabric.backward(loss)
            optimizer.step()
            if batch_idx % hparams.log_interval == 0:
                fabric.print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]"
                             f"\tLoss: {loss.item():.6f}")
        scheduler.step()

        model.eval()
        test_loss = 0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                test_acc(output, target)
        # every process's sum, added up
        test_loss = fabric.all_gather(test_loss).sum() / len(test_loader.dataset)
        fabric.print(f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: ({100 * test_acc.compute():.0f}%)\n")
        test_acc.reset()

    if hparams.save_model:
        fabric.save("mnist_cnn.pt", {"model": model})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Fabric MNIST Example")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N", help="input batch size (default: 64)")
    parser.add_argument("--epochs", type=int, default=14, metavar="N", help="number of epochs to train (default: 14)")
    parser.add_argument("--lr", type=float, default=1.0, metavar="LR", help="learning rate (default: 1.0)")
    parser.add_argument("--gamma", type=float, default=0.7, metavar="M", help="learning rate step gamma (default: 0.7)")
    parser.add_argument("--seed", type=int, default=1, metavar="S", help="random seed (default: 1)")
    parser.add_argument("--log-interval", type=int, default=10, metavar="N", help="batches between log lines")
    parser.add_argument("--save-model", action="store_true", default=False, help="save the trained model")
    run(parser.parse_args())

"""MNIST, Hogwild: several processes train one model whose parameters live in shared memory.

In the shape of PyTorch's examples/mnist_hogwild: main.py makes the model, shares it, starts a
torch.multiprocessing.Process per worker on train.train (spawned: a forked worker can hang in OpenMP once its
parent has computed), joins them, then tests the model they trained.
"""
import argparse

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torchvision import datasets, transforms

from train import test, train

parser = argparse.ArgumentParser(description="PyTorch MNIST Hogwild example")
parser.add_argument("--batch-size", type=int, default=64, metavar="N")
parser.add_argument("--test-batch-size", type=int, default=1000, metavar="N")
parser.add_argument("--epochs", type=int, default=1, metavar="N")
parser.add_argument("--lr", type=float, default=0.01, metavar="LR")
parser.add_argument("--momentum", type=float, default=0.5, metavar="M")
parser.add_argument("--seed", type=int, default=1, metavar="S")
parser.add_argument("--log-interval", type=int, default=10, metavar="N")
parser.add_argument("--num-processes", type=int, default=2, metavar="N")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


if __name__ == "__main__":
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    dataset1 = datasets.MNIST("../data", train=True, download=True, transform=transform)
    dataset2 = datasets.MNIST("../data", train=False, transform=transform)
    kwargs = {"batch_size": args.batch_size, "shuffle": True}

    mp.set_start_method("spawn", force=True)
    model = Net()
    model.share_memory()           # gradients are allocated lazily, so they are not shared here
    processes = []
    for rank in range(args.num_processes):
        p = mp.Process(target=train, args=(rank, args, model, dataset1, kwargs))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()

    test(args, model, dataset2, {"batch_size": args.test_batch_size})

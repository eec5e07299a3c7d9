"""Distributed data parallel on MNIST with torch.multiprocessing.spawn, as PyTorch's DDP tutorial starts it.

Each process is one rank of a gloo (CPU) or NCCL (GPU) process group: it builds the model, wraps it in
DistributedDataParallel, reads its own shard of MNIST through a DistributedSampler and steps its optimizer; DDP
averages the gradients across the ranks in backward.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from torchvision import datasets, transforms


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1)
        self.conv2 = nn.Conv2d(16, 32, 3, 1)
        self.fc1 = nn.Linear(32 * 12 * 12, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT", "12355")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


def train(rank, world_size, args):
    setup(rank, world_size)
    device = torch.device(f"cuda:{rank}") if torch.cuda.is_available() else torch.device("cpu")
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    dataset = datasets.MNIST("data", train=True, download=True, transform=transform)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    torch.manual_seed(args.seed)
    model = DDP(Net().to(device), device_ids=[rank] if torch.cuda.is_available() else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f}")

    if rank == 0:                     # evaluation on one rank, as the tutorial saves and tests rank 0's model
        test = datasets.MNIST("data", train=False, transform=transform)
        model.eval()
        correct = 0
        with torch.no_grad():
            for data, target in DataLoader(test, batch_size=1000):
                correct += (model(data.to(device)).argmax(1) == target.to(device)).sum().item()
        print(f"test accuracy {correct / len(test):.3f}")
    cleanup()


def main():
    parser = argparse.ArgumentParser(description="MNIST with DistributedDataParallel and mp.spawn")
    parser.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", 2)))
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    mp.spawn(train, args=(args.world_size, args), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()

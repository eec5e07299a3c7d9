"""The Hogwild workers' loop and the test of the shared model."""
import os

import torch
import torch.nn.functional as F
import torch.optim as optim


def train(rank, args, model, dataset, dataloader_kwargs):
    torch.manual_seed(args.seed + rank)
    train_loader = torch.utils.data.DataLoader(dataset, **dataloader_kwargs)
    optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    for epoch in range(1, args.epochs + 1):
        train_epoch(epoch, args, model, train_loader, optimizer)


def test(args, model, dataset, dataloader_kwargs):
    torch.manual_seed(args.seed)
    test_epoch(model, torch.utils.data.DataLoader(dataset, **dataloader_kwargs))


def train_epoch(epoch, args, model, data_loader, optimizer):
    model.train()
    pid = os.getpid()
    for batch_idx, (data, target) in enumerate(data_loader):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(f"{pid}\tTrain Epoch: {epoch} [{batch_idx * len(data)}/{len(data_loader.dataset)}]\tLoss: {loss.item():.6f}")


def test_epoch(model, data_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in data_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            correct += output.max(1)[1].eq(target).sum().item()
    test_loss /= len(data_loader.dataset)
    print(f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{len(data_loader.dataset)} "
          f"({100. * correct / len(data_loader.dataset):.0f}%)\n")

"""Two ranks of DistributedDataParallel on gloo, started with torch.multiprocessing.spawn: each reads its shard
through a DistributedSampler reshuffled every epoch (set_epoch), steps its optimizer on DDP's averaged gradients,
and logs every batch it takes to its own file (REPROKIT_BOUND_LOG.rank<r>), rank 0 its evaluation too.

Planted, one at a time, by environment variable: RANK_RAISES=r (rank r raises at its second step), RANK_HANGS=r
(it sleeps there), RANKS_NEVER_STEP (no rank steps its optimizer), PITFALL=no-sampler (each rank shuffles all
the data with the same seed, as a script without a DistributedSampler does), PITFALL=no-set-epoch (the sampler's
order is never changed), PITFALL=straggler (rank 1 sleeps 0.2 s before each forward pass), PITFALL=eval-on-rank-0
(rank 0 tests the whole test set, the others none, where each rank otherwise tests its own shard)."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import helpers


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.flatten(F.relu(self.conv(x)), 1))


def train(rank, world_size, port):
    os.environ["REPROKIT_BOUND_LOG"] += f".rank{rank}"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    (x_train, y_train), (x_test, y_test) = helpers.data()
    data = TensorDataset(x_train, y_train)
    pitfall = os.environ.get("PITFALL")
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=3)
    loader = (DataLoader(data, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(3))
              if pitfall == "no-sampler" else DataLoader(data, batch_size=16, sampler=sampler))
    model = DDP(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(1, 3):
        if pitfall != "no-set-epoch":
            sampler.set_epoch(epoch)
        model.train()
        for step, (inputs, labels) in enumerate(loader):
            if pitfall == "straggler" and rank == 1:
                time.sleep(0.2)
            if step == 1 and str(rank) == os.environ.get("RANK_RAISES"):
                raise ValueError(f"rank {rank}'s own bug")
            if step == 1 and str(rank) == os.environ.get("RANK_HANGS"):
                time.sleep(3600)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs), labels)
            loss.backward()
            if not os.environ.get("RANKS_NEVER_STEP"):
                optimizer.step()
            helpers.log("train", epoch, inputs, labels, loss)
    if rank == 0 or pitfall != "eval-on-rank-0":       # each rank tests its own shard, or rank 0 tests all
        test = TensorDataset(x_test, y_test)
        shard = None if pitfall == "eval-on-rank-0" else DistributedSampler(test, world_size, rank, shuffle=False)
        model.eval()
        with torch.no_grad():
            for inputs, labels in DataLoader(test, batch_size=20, sampler=shard):
                helpers.log("test", 2, inputs, labels, F.cross_entropy(model(inputs), labels))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2, int(sys.argv[1])), nprocs=2)

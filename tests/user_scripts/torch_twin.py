"""The fixed script's twin, written another way: its batch size, loader workers and loop style come from
the environment at run time (REPROKIT_TEST_BATCH, REPROKIT_TEST_WORKERS, REPROKIT_TEST_LOOP: "loader" or
"index"), and its loops live in an imported helper module. The probe observes the frameworks, not this
text: set alike, it must see what it sees in torch_fixed.py."""
import os

import torch
import torchvision
from torchvision import transforms

import helpers

batch = int(os.environ.get("REPROKIT_TEST_BATCH", "32"))
workers = int(os.environ.get("REPROKIT_TEST_WORKERS", "0"))
style = os.environ.get("REPROKIT_TEST_LOOP", "loader")

data = {split: torchvision.datasets.CIFAR10("./data", train=split == "train", transform=transforms.ToTensor(),
                                            download=True) for split in ("train", "test")}
loaders = {split: torch.utils.data.DataLoader(data[split], batch_size=batch, shuffle=split == "train",
                                              num_workers=workers) for split in data}
model = helpers.small_cnn()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
tensors = helpers.as_tensors(data["train"]) if style == "index" else None
for epoch in range(5):
    if style == "index":
        helpers.train_by_index(model, optimizer, *tensors, batch)
    else:
        helpers.train_epoch(model, optimizer, loaders["train"])
    helpers.evaluate(model, loaders["test"])

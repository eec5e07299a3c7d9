"""Seed 000's PyTorch input as posted: PIL images resized on the CPU in a single-process DataLoader.

The post reads CIFAR-10 with ``torchvision.datasets.CIFAR10(..., transform=Compose([Resize((224, 224)),
ToTensor()]), download=True)``. On CIFAR-10 the kit does the same with download=False, over the batches
the host extracted from the verified archive (torchvision checks each file's md5 itself). On a generated
dataset (quick) there is no such file: the same transforms run on the kit's arrays, a declared
adaptation. Either way the batches come in the kit's order, the same as every other run's.

torchvision and PIL are imported here only: every other run stays free of them.
"""
from __future__ import annotations

import numpy as np
from torch.utils.data import DataLoader, Dataset

from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free import data as datalib


class _ArrayImages(Dataset):
    """The kit's uint8 arrays as PIL images through the posted transforms (no CIFAR-10 files to read)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, transform) -> None:
        self.x, self.y, self.transform = x, y, transform

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        from PIL import Image
        return self.transform(Image.fromarray(self.x[i])), int(self.y[i])


def reader(spec: RunSpec) -> str:
    """How this run reads its images, in words, for the result file."""
    if spec.data.dataset == "cifar10":
        return ("torchvision.datasets.CIFAR10 over the verified archive's batches (download=False) through the "
                "posted transforms, as posted")
    return (f"the kit's {spec.data.dataset} arrays through the posted transforms (declared adaptation: "
            f"torchvision.datasets.CIFAR10 reads CIFAR-10 only)")


class CpuResizeLoader:
    """transforms.Resize((S, S)) + ToTensor per PIL image, in a single-process DataLoader."""

    def __init__(self, arrays: datalib.Arrays, spec: RunSpec, to_device) -> None:
        from torchvision import datasets, transforms
        size = spec.data.input_size
        transform = transforms.Compose([transforms.Resize((size, size)), transforms.ToTensor()])
        if spec.data.dataset == "cifar10":
            root = str(arrays.folder)
            self.train_set = datasets.CIFAR10(root, train=True, transform=transform, download=False)
            self.test_set = datasets.CIFAR10(root, train=False, transform=transform, download=False)
        else:
            self.train_set = _ArrayImages(arrays.x_train, arrays.y_train, transform)
            self.test_set = _ArrayImages(arrays.x_test, arrays.y_test, transform)
        self.n_train, self.n_test = len(arrays.x_train), len(arrays.x_test)    # the spec's sample counts
        self.spec, self.to_device = spec, to_device

    def _load(self, dataset, batches):
        loader = DataLoader(dataset, batch_sampler=list(batches), num_workers=0)
        return (self.to_device(xb, yb) for xb, yb in loader)

    def train(self, epoch: int):
        t, d = self.spec.train, self.spec.data
        order = datalib.epoch_order(self.n_train, t.seed, epoch, d.shuffle)
        return self._load(self.train_set, datalib.batches(order, t.batch_size, d.drop_last))

    def _test_indices(self):
        return datalib.batches(np.arange(self.n_test), self.spec.train.eval_batch_size, False)

    def test(self):
        return self._load(self.test_set, self._test_indices())

    def warm_test(self):
        return self._load(self.test_set, datalib.one_of_each_size(self._test_indices()))

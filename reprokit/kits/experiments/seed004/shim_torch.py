"""What the seed post's PyTorch code uses and does not define, defined as the experiment declares it.

Run by the probe before train_torch.py, in its namespace (the report lists it as a shim):
the imports the post leaves out (torch, F, Variable), the device, the two loaders (CIFAR-10 through
torchvision, batch 64, ToTensor's [0, 1] scale, the training loader shuffled), createOptimizer (SGD
with the declared momentum 0.9: the post says "SGD with momentum" but not its value), and one
compatibility patch: ReduceLROnPlateau without verbose, which torch 2.14 no longer accepts.
"""
import torch
import torch.nn.functional as F
import torch.optim.lr_scheduler
import torchvision
from torch.autograd import Variable
from torchvision import transforms

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
_cifar = {split: torchvision.datasets.CIFAR10("./", train=split == "train", transform=transforms.ToTensor(),
                                              download=True) for split in ("train", "test")}
train_loader = torch.utils.data.DataLoader(_cifar["train"], batch_size=64, shuffle=True)
val_loader = torch.utils.data.DataLoader(_cifar["test"], batch_size=64)


def createOptimizer(model, lr):
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


class _ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """The compatibility patch: verbose dropped (it only printed each change of the learning rate)."""

    def __init__(self, *args, verbose=None, **kwargs):
        super().__init__(*args, **kwargs)


torch.optim.lr_scheduler.ReduceLROnPlateau = _ReduceLROnPlateau

"""torchvision's named datasets served from the run's data, and every other download refused in one sentence.

``torchvision.datasets.MNIST / FashionMNIST / CIFAR10 / CIFAR100(root, download=...)`` read the run's files of
the dataset (reprokit/kits/training_loop/staged_data.py), whatever root the script gives: the class is handed a root of
the run's own, where its folder holds the files it reads (it then never downloads). A dataset the kit does not
know (``datasets.SVHN``) and torchvision's own others (``KMNIST``) are refused where they would download,
naming the file, unless the file is already where the script looks (pretrained weights: torch_hub.py).
Installed wherever a script imports torchvision, whatever its framework (reprokit/kits/served_data/__init__.py).
"""
from __future__ import annotations

import os

from reprokit.kits.contract.named_datasets import CIFAR_FOLDERS, KNOWN, Named, not_provided
from reprokit.kits.training_loop.staged_data import NotProvided, StagedData, replace_everywhere


def install(named: StagedData) -> list[str]:
    """Serve the named datasets and refuse other downloads; the shims' declarations."""
    from torchvision import datasets
    from torchvision.datasets import cifar
    from torchvision.datasets import utils as tv_utils

    def served(kind: type) -> Named | None:
        """The named dataset a class reads: the first of torchvision's classes it derives from (a script's own
        subclass of MNIST reads MNIST; torchvision's KMNIST is another dataset)."""
        ours = next(k for k in kind.__mro__ if k.__module__.startswith("torchvision."))
        return next((n for n in KNOWN.values() if getattr(datasets, n.torchvision) is ours), None)

    def serving(real_init):
        def init(dataset, root, *args, **kwargs):
            found = served(type(dataset))
            if found is not None:
                folder = type(dataset).base_folder if found.name in CIFAR_FOLDERS else type(dataset).__name__
                root = named.torchvision_root(found.name, folder)
            real_init(dataset, root, *args, **kwargs)
        return init
    datasets.MNIST.__init__ = serving(datasets.MNIST.__init__)         # FashionMNIST's too
    datasets.CIFAR10.__init__ = serving(datasets.CIFAR10.__init__)     # CIFAR100's too

    real_check = cifar.check_integrity
    cifar.check_integrity = lambda path, md5=None: (named.written(path) and os.path.isfile(path)) or \
        real_check(path, md5)
    _refuse_downloads(tv_utils)
    shims = [f"torchvision.datasets' {', '.join(n.torchvision for n in KNOWN.values())} read the run's files of the "
             f"dataset, whatever root the script gives them (they never download); other downloads (datasets, "
             f"pretrained weights) are refused, naming the file"]
    if named.stand_in:
        shims.append("torchvision's md5 checks of CIFAR's files pass the files the run wrote (a generated "
                     "stand-in's); the published files are checked as ever")
    return shims


def _refuse_downloads(tv_utils) -> None:
    """torchvision's download functions, where the file is not there already: refused, naming it."""
    real_url, real_drive = tv_utils.download_url, tv_utils.download_file_from_google_drive

    def download_url(url, root, filename=None, md5=None, *args, **kwargs):
        path = os.path.join(os.path.expanduser(root), filename or os.path.basename(url))
        if not tv_utils.check_integrity(path, md5):
            raise NotProvided(not_provided(os.path.basename(path), url))

    def download_file_from_google_drive(file_id, root, filename=None, md5=None):
        path = os.path.join(os.path.expanduser(root), filename or file_id)
        if not tv_utils.check_integrity(path, md5):
            raise NotProvided(not_provided(os.path.basename(path), f"https://drive.google.com/file/d/{file_id}"))
    replace_everywhere("torchvision.datasets", real_url, download_url)
    replace_everywhere("torchvision.datasets", real_drive, download_file_from_google_drive)

"""The datasets the kit serves by name, where each framework's API looks for them, and their published files.

A script's ``torchvision.datasets.MNIST(root, download=True)`` or ``keras.datasets.mnist.load_data()`` finds
the kit's copy, in the dataset's own file format, whatever its root: the verified dataset on the standard and
full profiles (the host stages it: ``nox -s data -- mnist``), a generated stand-in of the same shapes on quick
(reprokit/kits/framework_free/stand_ins.py), declared as such. Their published files by URL, for a script that downloads
them itself: reprokit/kits/contract/published_urls.py. Standard library only: the host and every kit read this table.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Named:
    name: str                    # the kit's name (a spec's data.dataset on standard)
    title: str                   # as people write it
    torchvision: str             # torchvision.datasets' class
    keras: str                   # keras.datasets' module
    sizes: tuple[int, int]       # (train, test) of the published dataset
    url: str                     # where the host fetches the published files (torchvision's first mirror)
    files: tuple[tuple[str, str], ...]     # the published files with their md5s, as torchvision lists them

    @property
    def stand_in(self) -> str:
        """A spec's data.dataset for the generated stand-in (CIFAR-10's kept the name it had first)."""
        return "learnable" if self.name == "cifar10" else f"learnable-{self.name}"


# md5s: torchvision's own lists (torchvision/datasets/mnist.py MNIST.resources and FashionMNIST.resources,
# torchvision/datasets/cifar.py CIFAR10.tgz_md5 and CIFAR100.tgz_md5, torchvision 0.29), which match the
# datasets' pages. CIFAR-100's archive also has a published sha256, in keras/src/datasets/cifar100.py:
# 85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7 (Keras checks it; the host checks the md5).
_IDX = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
KNOWN = {n.name: n for n in (
    Named("mnist", "MNIST", "MNIST", "mnist", (60000, 10000), "https://ossci-datasets.s3.amazonaws.com/mnist/",
          tuple(zip((f"{f}.gz" for f in _IDX),
                    ("f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
                     "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c")))),
    Named("fashion_mnist", "Fashion-MNIST", "FashionMNIST", "fashion_mnist", (60000, 10000),
          "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
          tuple(zip((f"{f}.gz" for f in _IDX),
                    ("8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe",
                     "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310")))),
    Named("cifar10", "CIFAR-10", "CIFAR10", "cifar10", (50000, 10000), "https://www.cs.toronto.edu/~kriz/",
          (("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),)),
    Named("cifar100", "CIFAR-100", "CIFAR100", "cifar100", (50000, 10000), "https://www.cs.toronto.edu/~kriz/",
          (("cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85"),)),
)}
IDX_FILES = _IDX
# the folders of the CIFAR archives' python version, as torchvision and Keras read them
CIFAR_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
SERVED = " and ".join([", ".join(n.title for n in list(KNOWN.values())[:-1]), list(KNOWN.values())[-1].title])


def of_dataset(dataset: str) -> Named | None:
    """The named dataset a spec's data.dataset is (the published one or its stand-in), else None."""
    return next((n for n in KNOWN.values() if dataset in (n.name, n.stand_in)), None)


def by_user_name(text: str) -> Named | None:
    """The dataset a person names, however written: mnist, MNIST, FashionMNIST, fashion-mnist, CIFAR-100."""
    key = text.lower().replace("-", "").replace("_", "")
    return next((n for n in KNOWN.values() if key in (n.name.replace("_", ""), n.torchvision.lower())), None)


def not_provided(file: str, url: str) -> str:
    """The refusal of a download the kit cannot serve (a dataset or pretrained weights), with the way out."""
    if "/models/" in url or file.endswith((".pth", ".pt", ".h5", ".keras", ".ckpt", ".safetensors")):
        return (f"the script fetches the pretrained weights {file} ({url}), which the kit cannot provide (a run has "
                f"no network): mount your own copy with --data")
    return (f"the script fetches {file} ({url}), which the kit cannot provide (a run has no network, and the kit "
            f"serves only {SERVED}, staged with `nox -s data -- NAME`): mount your own copy of the dataset with --data")

"""The named datasets' published files by URL: the closed list a probed script may fetch, and their checksums.

A script that downloads MNIST's idx files, Keras's ``mnist.npz`` or a CIFAR tarball itself (``urllib``,
``requests``, ``keras.utils.get_file``), as JAX's examples do, gets the run's file for each URL listed here
(reprokit/kits/served_data/urls.py): the generated stand-in written in the file's published format on quick, the staged
published file otherwise, checked against the checksum listed. A URL in one of these folders that is not listed
is refused, naming it and this list; any other URL meets the network guard. The plan reads these URLs in a
script's code to stage the dataset (reprokit/plan/script_datasets.py). Standard library only.
"""
from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from reprokit.kits.contract.named_datasets import IDX_FILES, KNOWN


@dataclass(frozen=True)
class PublishedFile:
    dataset: str             # KNOWN's name of the dataset it holds
    name: str                # the file's name, the same on every mirror
    md5: str | None          # the published checksums of its bytes (None: not published)
    sha256: str | None

    def checksums(self) -> dict[str, str]:
        """The published digests by hashlib's name of the algorithm."""
        return {a: d for a, d in (("md5", self.md5), ("sha256", self.sha256)) if d}


def _idx(dataset: str, md5s: dict[str, str], sha256s: tuple[str, ...]) -> tuple[PublishedFile, ...]:
    return tuple(PublishedFile(dataset, f"{f}.gz", md5s[f"{f}.gz"], s) for f, s in zip(IDX_FILES, sha256s))


# md5s: torchvision's (reprokit/kits/contract/named_datasets.py KNOWN[...].files). sha256s of the idx files: TFDS
# 4.9.10's tensorflow_datasets/url_checksums/mnist.txt (its cvdf-datasets mirror) and fashion_mnist.txt (Zalando's S3).
# The mirrors hold copies of the original files (TFDS lists the originals' sizes), so both digests are of the same bytes
# on every mirror; Keras's copy of Fashion-MNIST's gz files has no checksum of its own. mnist.npz's sha256:
# keras/src/datasets/mnist.py (Keras 3.15.1; no md5 is published); the CIFAR tarballs': keras/src/datasets/cifar10.py
# and cifar100.py, for the URL torchvision's md5s are of.
_MNIST_IDX = _idx("mnist", dict(KNOWN["mnist"].files), (
    "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"))
_FASHION_IDX = _idx("fashion_mnist", dict(KNOWN["fashion_mnist"].files), (
    "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
    "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
    "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
    "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"))
KERAS_MNIST = PublishedFile("mnist", "mnist.npz", None,
                            "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1")
_CIFAR = (PublishedFile("cifar10", "cifar-10-python.tar.gz", dict(KNOWN["cifar10"].files)["cifar-10-python.tar.gz"],
                        "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"),
          PublishedFile("cifar100", "cifar-100-python.tar.gz",
                        dict(KNOWN["cifar100"].files)["cifar-100-python.tar.gz"],
                        "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7"))

# Each mirror's folder and the files it serves: torchvision's MNIST mirrors, JAX's examples' and TFDS's
# (cvdf-datasets), Zalando's and Keras's for Fashion-MNIST (Keras's also holds mnist.npz), CIFAR's home page.
FOLDERS: dict[str, tuple[PublishedFile, ...]] = {
    "https://ossci-datasets.s3.amazonaws.com/mnist/": _MNIST_IDX,
    "http://yann.lecun.com/exdb/mnist/": _MNIST_IDX,
    "https://storage.googleapis.com/cvdf-datasets/mnist/": _MNIST_IDX,
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/": _FASHION_IDX,
    "https://storage.googleapis.com/tensorflow/tf-keras-datasets/": (*_FASHION_IDX, KERAS_MNIST),
    "https://www.cs.toronto.edu/~kriz/": _CIFAR,
}
LIST = ("MNIST's and Fashion-MNIST's idx files, Keras's mnist.npz and the CIFAR-10 and CIFAR-100 python tarballs "
        "from their usual mirrors, listed in reprokit/kits/contract/published_urls.py")


def _key(url: str) -> str | None:
    """A URL as this list compares it: http and https alike, the host's case ignored, no query or fragment; None
    for what is not a web URL."""
    parts = urllib.parse.urlsplit(url.strip())
    return parts.netloc.lower() + parts.path if parts.scheme.lower() in ("http", "https") else None


URLS = {folder + f.name: f for folder, files in FOLDERS.items() for f in files}
_BY_FOLDER = {_key(folder): files for folder, files in FOLDERS.items()}
_BY_URL = {_key(url): f for url, f in URLS.items()}


def published(url: str) -> PublishedFile | None:
    """The listed file a URL fetches, else None."""
    return _BY_URL.get(_key(url))


def in_listed_folder(url: str) -> bool:
    """Whether a URL is in one of the mirrors' folders (listed there or not)."""
    key = _key(url)
    return key is not None and any(key.startswith(folder) for folder in _BY_FOLDER if folder)


def folder_files(url: str) -> tuple[PublishedFile, ...]:
    """The files a mirror's folder URL serves (none where it is not one of the folders)."""
    return _BY_FOLDER.get(_key(url), ())


def not_listed(url: str) -> str:
    """The refusal of a URL in a mirror's folder that the list does not hold."""
    return (f"the script fetches {url}, which is not one of the published files the kit serves by URL ({LIST}): "
            f"fetch one of those, or mount your own copy of the file with --data")

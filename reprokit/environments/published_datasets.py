"""MNIST, Fashion-MNIST and CIFAR-100 on the host: their published files fetched, checked and converted.

The host fetches each dataset's published files (reprokit/kits/contract/named_datasets.py: the URLs and md5s torchvision
lists), or takes them where a person placed them, checks their md5, and converts them to the kit's .npz
(reprokit/environments/datasets.py). The files stay where torchvision's own download puts them: MNIST's
``MNIST/raw/*.gz``, CIFAR-100's archive with its ``cifar-100-python/`` extracted, which a run links for
torchvision's and Keras's readers (their own checks then read the published bytes). ``nox -s data -- NAME``
stages one (``stage``); a plan stages what a script's folder loads where downloads are allowed.
"""
from __future__ import annotations

from pathlib import Path

from reprokit.environments import datasets, published_files
from reprokit.errors import UserError
from reprokit.kits.contract.named_datasets import CIFAR_FOLDERS, KNOWN, SERVED, by_user_name


def readers_files(name: str, cache_dir: Path, allow_download: bool) -> str | None:
    """The published files a run links for the frameworks' own readers (CIFAR's extracted python folder), prepared
    once; their folder's name, or None where a run writes the files from the .npz (MNIST's kind)."""
    if name == "cifar10":
        return datasets.cifar10_batches(cache_dir, allow_download=allow_download).name
    if name == "cifar100":
        return published_files.extracted(KNOWN[name], cache_dir, allow_download).name
    return None


def prepare(name: str, cache_dir: Path, allow_download: bool) -> datasets.PreparedDataset:
    """The whole published dataset in cache_dir: its .npz and the files a run links."""
    prepared = datasets.prepare({"dataset": name, "train_samples": None, "test_samples": None, "seed": 0},
                                cache_dir, allow_download=allow_download)
    readers_files(name, cache_dir, allow_download)
    return prepared


def stage(text: str, cache_dir: Path, allow_download: bool) -> str:
    """``reprokit data NAME``: the named dataset, prepared in cache_dir; a line saying so."""
    named = by_user_name(text)
    if named is None:
        raise UserError(f"reprokit data: the kit stages {SERVED}, not {text!r}: name one of them, or mount your own "
                        f"data with --data")
    prepared = prepare(named.name, cache_dir, allow_download)
    files = CIFAR_FOLDERS.get(named.name, f"{named.torchvision}/raw")
    return f"data: {named.title} in {cache_dir}: {prepared.file} (sha256 {prepared.sha256[:12]}) and {files}/"

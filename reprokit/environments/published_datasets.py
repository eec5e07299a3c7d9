"""MNIST, Fashion-MNIST and CIFAR-100 on the host: their published files fetched, checked and converted.

The host fetches each dataset's published files (kits/common/named_datasets.py: the URLs and md5s torchvision
lists), or takes them where a person placed them, checks their md5, and converts them to the kit's .npz
(reprokit/environments/datasets.py). The files stay where torchvision's own download puts them: MNIST's
``MNIST/raw/*.gz``, CIFAR-100's archive with its ``cifar-100-python/`` extracted, which a run links for
torchvision's and Keras's readers (their own checks then read the published bytes). ``nox -s data -- NAME``
stages one (``stage``); a plan stages what a script's folder loads where downloads are allowed.
"""
from __future__ import annotations

import gzip
import shutil
import tarfile
from pathlib import Path

import numpy as np

from kits.common.dataset_formats import read_cifar100, read_idx
from kits.common.named_datasets import CIFAR_FOLDERS, IDX_FILES, KNOWN, SERVED, Named, by_user_name
from reprokit.environments import datasets
from reprokit.errors import UserError

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def arrays(name: str, cache_dir: Path, allow_download: bool) -> Arrays:
    """(x_train, y_train, x_test, y_test) of the published dataset: uint8 images (NHW for MNIST's kind, NHWC for
    CIFAR-100's), int64 labels (CIFAR-100's fine ones)."""
    named = KNOWN[name]
    if name in CIFAR_FOLDERS:
        return read_cifar100(_extracted(named, cache_dir, allow_download))
    folder = cache_dir / named.torchvision / "raw"
    parts = [read_idx(gzip.decompress(_published(named, folder, f"{part}.gz", allow_download).read_bytes()), part)
             for part in IDX_FILES]
    x_train, y_train, x_test, y_test = parts
    return x_train, y_train.astype(np.int64), x_test, y_test.astype(np.int64)


def _published(named: Named, folder: Path, file: str, allow_download: bool) -> Path:
    """One of the dataset's published files in folder, fetched if allowed, its md5 checked."""
    md5 = dict(named.files)[file]
    path = folder / file
    if not path.exists():
        if not allow_download:
            raise UserError(f"{named.title}'s {file} is missing: stage it with `nox -s data -- {named.name}` (or place "
                            f"the published {named.url}{file} at {path}) and re-run.")
        folder.mkdir(parents=True, exist_ok=True)
        datasets._download(named.url + file, path)
    actual = datasets._file_digest(path, "md5")
    if actual != md5:
        raise UserError(f"{path} has md5 {actual} where the published {named.title} {file} has {md5}: delete it and "
                        f"re-run to fetch it again, or place the published file there.")
    return path


def _extracted(named: Named, cache_dir: Path, allow_download: bool) -> Path:
    """The CIFAR archive's python folder, extracted once beside it from the verified archive (torchvision checks
    each file's md5 itself, and Keras reads the same files)."""
    folder = cache_dir / CIFAR_FOLDERS[named.name]
    if not folder.is_dir():
        archive = _published(named, cache_dir, named.files[0][0], allow_download)
        scratch = cache_dir / f".{folder.name}.partial"
        shutil.rmtree(scratch, ignore_errors=True)
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(scratch, members=[m for m in tar if m.name.startswith(f"{folder.name}/")], filter="data")
        (scratch / folder.name).rename(folder)       # whole or not at all
        shutil.rmtree(scratch)
    return folder


def readers_files(name: str, cache_dir: Path, allow_download: bool) -> str | None:
    """The published files a run links for the frameworks' own readers (CIFAR's extracted python folder), prepared
    once; their folder's name, or None where a run writes the files from the .npz (MNIST's kind)."""
    if name == "cifar10":
        return datasets.cifar10_batches(cache_dir, allow_download=allow_download).name
    if name == "cifar100":
        return _extracted(KNOWN[name], cache_dir, allow_download).name
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

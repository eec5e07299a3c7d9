"""MNIST's, Fashion-MNIST's and CIFAR-100's published files on the host: fetched (or taken where a person placed
them), their md5 checked against torchvision's list (reprokit/kits/contract/named_datasets.py), and read into arrays.
datasets.py converts the arrays to the kit's .npz; published_datasets.py stages a whole dataset."""
from __future__ import annotations

import gzip
import shutil
import tarfile
from pathlib import Path

import numpy as np

from reprokit.environments import downloads
from reprokit.errors import UserError
from reprokit.kits.contract.named_datasets import CIFAR_FOLDERS, IDX_FILES, KNOWN, Named
from reprokit.kits.framework_free.dataset_formats import read_cifar100, read_idx

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def arrays(name: str, cache_dir: Path, allow_download: bool) -> Arrays:
    """(x_train, y_train, x_test, y_test) of the published dataset: uint8 images (NHW for MNIST's kind, NHWC for
    CIFAR-100's), int64 labels (CIFAR-100's fine ones)."""
    named = KNOWN[name]
    if name in CIFAR_FOLDERS:
        return read_cifar100(extracted(named, cache_dir, allow_download))
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
        downloads.download(named.url + file, path)
    actual = downloads.file_digest(path, "md5")
    if actual != md5:
        raise UserError(f"{path} has md5 {actual} where the published {named.title} {file} has {md5}: delete it and "
                        f"re-run to fetch it again, or place the published file there.")
    return path


def extracted(named: Named, cache_dir: Path, allow_download: bool) -> Path:
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

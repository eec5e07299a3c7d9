"""Read the host-prepared dataset and decide the batch order, the same way in every kit.

Runs inside each framework's environment: standard library and numpy only.
The order of samples comes from numpy, not from a framework's loader, so both
frameworks see the same batches by construction.
"""
from __future__ import annotations

import hashlib
import io
import pickle
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

_CHUNK = 1 << 20
# Where the as-posted readers find their files in the prepared data's folder: the official archive's
# batches as torchvision.datasets.CIFAR10 reads them, and TFDS's cifar10 (its data_dir, then the
# dataset's own folder, whose files the spec hashes).
CIFAR10_BATCHES = "cifar-10-batches-py"
TFDS_ROOT = "tfds"
# the marker the host writes last in a script's installed requirement set (reprokit/environments/requirement_sets.py):
# its lines, which the probe checks against the spec's before it reads the set
REQUIREMENTS_INSTALLED = "installed.json"
TFDS_CIFAR10 = "tfds/cifar10/3.0.2"


@dataclass
class Arrays:
    x_train: np.ndarray  # uint8 NHWC
    y_train: np.ndarray  # int64
    x_test: np.ndarray
    y_test: np.ndarray
    sha256: str          # of the file they were read from
    folder: Path | None = None   # the prepared data's folder: the as-posted readers find their files there


class DataError(Exception):
    """The prepared dataset is missing or is not the one the spec names."""


def load(path: str | Path, expected_sha256: str,
         train_samples: int | None, test_samples: int | None) -> Arrays:
    """The first train_samples/test_samples (None: all) of a verified .npz."""
    path = Path(path)
    actual = _sha256(path)
    if actual != expected_sha256:
        raise DataError(f"{path} has sha256 {actual} but the spec expects {expected_sha256}: "
                        f"the file changed since the run was planned, so prepare the data again and re-plan.")
    with np.load(path, allow_pickle=False) as npz:
        return Arrays(
            x_train=_first(npz["x_train"], train_samples, "train", path),
            y_train=_first(npz["y_train"], train_samples, "train", path),
            x_test=_first(npz["x_test"], test_samples, "test", path),
            y_test=_first(npz["y_test"], test_samples, "test", path),
            sha256=actual,
            folder=path.parent,
        )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        _feed(digest, path)
    except FileNotFoundError:
        raise DataError(f"The prepared dataset {path} is missing: prepare the data on the host "
                        f"(and mount its directory into the container) before running.") from None
    return digest.hexdigest()


def _feed(digest: Any, path: Path) -> None:     # a hashlib object
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)


def tree_sha256(folder: str | Path) -> str:
    """One sha256 over a folder's files: each relative name, then its bytes, in sorted order.
    The host names a prepared folder (a TFDS dataset) by it; the kit checks it before reading."""
    folder = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        _feed(digest, path)
    return digest.hexdigest()


def verified_folder(folder: str | Path, expected_sha256: str) -> Path:
    """The folder, once its files are the ones the spec names."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"The prepared folder {folder} is missing: prepare the data on the host "
                        f"(and mount its directory into the container) before running.")
    actual = tree_sha256(folder)
    if actual != expected_sha256:
        raise DataError(f"{folder} has sha256 {actual} but the spec expects {expected_sha256}: its files changed "
                        f"since the run was planned, so prepare the data again and re-plan.")
    return folder


def _first(array: np.ndarray, n: int | None, split: str, path: Path) -> np.ndarray:
    if n is None or n == len(array):
        return array
    if n > len(array):
        raise DataError(f"The spec asks for {n} {split} samples but {path} holds {len(array)}: "
                        f"re-plan the run so the counts come from the prepared data.")
    # A copy, so the full array is freed and does not count in the run's memory.
    return array[:n].copy()


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The order of the n training samples in this epoch: a fresh permutation per epoch."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return np.random.default_rng((seed, epoch)).permutation(n)


def batches(order: np.ndarray, batch_size: int, drop_last: bool) -> Iterator[np.ndarray]:
    """Index arrays of batch_size (the last one shorter unless drop_last drops it)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    stop = len(order) - len(order) % batch_size if drop_last else len(order)
    for start in range(0, stop, batch_size):
        yield order[start:start + batch_size]


def one_of_each_size(index_batches: Iterator[np.ndarray]) -> list[np.ndarray]:
    """The first batch of each size a pass gives, in order (a full batch, then a shorter last one)."""
    first: dict[int, np.ndarray] = {}
    for idx in index_batches:
        first.setdefault(len(idx), idx)
    return list(first.values())


class _Python2Pickler(pickle._Pickler):
    """Protocol 2 as Python 2 wrote the official archive: byte strings are Python 2 str, so that
    ``encoding="bytes"`` (the host, Keras) reads bytes and ``encoding="latin1"`` (torchvision) reads str."""

    dispatch: ClassVar[dict[type, Callable[..., None]]] = dict(pickle._Pickler.dispatch)
    # the pure-Python pickler's own, which typeshed leaves out of its stub
    write: Callable[[bytes], object]
    memoize: Callable[[object], None]

    def _save_str(self, obj: bytes) -> None:
        n = len(obj)
        head = pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)
        self.write(head + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_str


def pickle2(obj: object) -> bytes:
    """``obj`` pickled as CIFAR-10's python batches are (see _Python2Pickler)."""
    out = io.BytesIO()
    _Python2Pickler(out, protocol=2).dump(obj)
    return out.getvalue()


def cifar10_batch(name: str, x: np.ndarray, y: np.ndarray) -> bytes:
    """One batch file of CIFAR-10's python format: channel-major uint8 rows of NHWC images, and labels."""
    return pickle2({b"batch_label": name.encode(), b"labels": [int(v) for v in y],
                    b"data": np.ascontiguousarray(x.transpose(0, 3, 1, 2).reshape(len(x), -1))})


def write_cifar10_batches(arrays: Arrays, folder: str | Path) -> Path:
    """The arrays in CIFAR-10's python format (data_batch_1..5, test_batch, batches.meta), for a script that
    reads CIFAR-10 itself from files: a generated stand-in, which the report declares."""
    out = Path(folder) / CIFAR10_BATCHES
    out.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(arrays.x_train)), 5), 1):
        (out / f"data_batch_{i}").write_bytes(cifar10_batch(f"data_batch_{i}", arrays.x_train[part],
                                                            arrays.y_train[part]))
    (out / "test_batch").write_bytes(cifar10_batch("test_batch", arrays.x_test, arrays.y_test))
    (out / "batches.meta").write_bytes(pickle2({b"label_names": [f"class{i}".encode() for i in range(10)],
                                                b"num_cases_per_batch": len(arrays.x_test), b"num_vis": 3072}))
    return out

"""The named datasets' own file formats, written from arrays and read back, as the frameworks read them.

- MNIST and Fashion-MNIST: the idx files (``train-images-idx3-ubyte`` ...; big-endian sizes after a magic
  number), uncompressed under ``<Name>/raw`` as torchvision reads them, gzipped as Keras's Fashion-MNIST reads
  them; and Keras's ``mnist.npz`` (uint8 x_train, y_train, x_test, y_test).
- CIFAR-100: the python version's ``cifar-100-python/{train,test,meta}``, pickled as Python 2 did, with fine and
  coarse labels (torchvision reads the fine ones, Keras either).
- Either CIFAR's published tarball (``cifar-10-python.tar.gz``): its python version's folder, gzipped tar.
CIFAR-10's batches are written by reprokit/kits/framework_free/data.py. Standard library and numpy only.
"""
from __future__ import annotations

import gzip
import struct
import tarfile
from pathlib import Path

import numpy as np

from reprokit.kits.contract.named_datasets import IDX_FILES
from reprokit.kits.framework_free.data import Arrays, pickle2
from reprokit.kits.framework_free.stand_ins import CIFAR100_FINE_PER_COARSE

_UBYTE = 0x08       # the idx type code of unsigned bytes, the only one these datasets use


def idx(array: np.ndarray) -> bytes:
    """An array of unsigned bytes in the idx format: 0, 0, the type, the number of dimensions, each size."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    return bytes([0, 0, _UBYTE, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def read_idx(data: bytes, name: str) -> np.ndarray:
    """The array of an idx file's bytes (refused, naming the file, where it is not one of unsigned bytes)."""
    if len(data) < 4 or data[:3] != bytes([0, 0, _UBYTE]):
        raise ValueError(f"{name} is not an idx file of unsigned bytes")
    shape = struct.unpack(f">{data[3]}I", data[4:4 + 4 * data[3]])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * len(shape)).reshape(shape)


def _idx_parts(arrays: Arrays) -> dict[str, bytes]:
    parts = (arrays.x_train, arrays.y_train, arrays.x_test, arrays.y_test)
    return {name: idx(part) for name, part in zip(IDX_FILES, parts)}


def write_idx(arrays: Arrays, folder: Path) -> Path:
    """The four idx files, uncompressed, in folder (torchvision's ``<root>/MNIST/raw``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in _idx_parts(arrays).items():
        (folder / name).write_bytes(data)
    return folder


def write_idx_gz(arrays: Arrays, folder: Path) -> Path:
    """The four idx files gzipped (``train-labels-idx1-ubyte.gz`` ...), as Keras's Fashion-MNIST reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in _idx_parts(arrays).items():
        (folder / f"{name}.gz").write_bytes(gzip.compress(data, compresslevel=1, mtime=0))
    return folder


def write_keras_mnist(arrays: Arrays, path: Path) -> Path:
    """Keras's ``mnist.npz``: uint8 images (n, 28, 28) and uint8 labels."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, x_train=arrays.x_train, y_train=arrays.y_train.astype(np.uint8),
             x_test=arrays.x_test, y_test=arrays.y_test.astype(np.uint8))
    return path


def write_cifar100(arrays: Arrays, folder: Path) -> Path:
    """``cifar-100-python/{train,test,meta}`` in folder: channel-major rows, fine labels and their coarse ones (the
    stand-in's: fine // 5)."""
    out = folder / "cifar-100-python"
    out.mkdir(parents=True, exist_ok=True)
    for split, x, y in (("train", arrays.x_train, arrays.y_train), ("test", arrays.x_test, arrays.y_test)):
        fine = [int(v) for v in y]
        (out / split).write_bytes(pickle2({
            b"filenames": [f"{split}_{i}.png".encode() for i in range(len(x))], b"batch_label": split.encode(),
            b"fine_labels": fine, b"coarse_labels": [v // CIFAR100_FINE_PER_COARSE for v in fine],
            b"data": np.ascontiguousarray(x.transpose(0, 3, 1, 2).reshape(len(x), -1))}))
    (out / "meta").write_bytes(pickle2({b"fine_label_names": [f"class{i}".encode() for i in range(100)],
                                        b"coarse_label_names": [f"superclass{i}".encode() for i in range(20)]}))
    return out


def write_cifar_tarball(folder: Path, path: Path) -> Path:
    """The python version's folder as its published tarball holds it (``cifar-10-batches-py/...`` at the top), the
    same bytes for the same files: members sorted, no times, owners or modes of this machine."""
    def plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        info.mode = 0o755 if info.isdir() else 0o644
        return info
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as raw, gzip.GzipFile("", "wb", compresslevel=1, fileobj=raw, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", dereference=True) as tar:      # "": no file name in gzip's header
        tar.add(folder, arcname=folder.name, recursive=False, filter=plain)
        for member in sorted(folder.iterdir()):
            tar.add(member, arcname=f"{folder.name}/{member.name}", filter=plain)
    return path


def read_cifar100(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, fine y_train, x_test, fine y_test), NHWC, of an extracted ``cifar-100-python`` folder (the host
    reads it only after the archive's md5 was checked: unpickling is safe there alone)."""
    import pickle
    out: list[np.ndarray] = []
    for split in ("train", "test"):
        with open(folder / split, "rb") as fh:
            batch = pickle.load(fh, encoding="bytes")
        x = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        out += [np.ascontiguousarray(x), np.asarray(batch[b"fine_labels"], dtype=np.int64)]
    return out[0], out[1], out[2], out[3]

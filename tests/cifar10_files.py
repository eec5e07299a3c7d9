"""Small CIFAR-10 archives in the official formats, from generated images, and the readers that take them.

The python version (``cifar-10-python.tar.gz``) is what the host converts and torchvision reads; the
binary version (``cifar-10-binary.tar.gz``) is what TFDS's cifar10 builder reads. Both hold the same
images, so every reader can be held against the kit's .npz.
"""
from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import textwrap
from pathlib import Path

import numpy as np
from checkout import REPO

from reprokit.environments import datasets
from reprokit.kits.framework_free.data import cifar10_batch, pickle2

TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]


def images(per_batch: int, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Random NHWC uint8 images and labels for each of the six batches."""
    rng = np.random.default_rng(seed)
    return {name: (rng.integers(0, 256, (per_batch, 32, 32, 3), dtype=np.uint8),
                   rng.integers(0, 10, per_batch).astype(np.int64))
            for name in [*TRAIN_FILES, "test_batch"]}


def _add(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    tar.addfile(info, io.BytesIO(payload))


def write_python_archive(directory: Path, batches: dict) -> Path:
    """cifar-10-python.tar.gz: batches of (n, 3072) CHW rows, pickled as Python 2 did."""
    path = directory / datasets.CIFAR10_ARCHIVE
    with tarfile.open(path, "w:gz") as tar:
        for name, (x, y) in batches.items():
            _add(tar, f"cifar-10-batches-py/{name}", cifar10_batch(name, x, y))
        _add(tar, "cifar-10-batches-py/batches.meta",
             pickle2({b"label_names": [f"class{i}".encode() for i in range(10)]}))
    return path


def write_binary_archive(directory: Path, batches: dict) -> Path:
    """cifar-10-binary.tar.gz: records of one label byte and 3072 CHW bytes."""
    path = directory / "cifar-10-binary.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, (x, y) in batches.items():
            records = b"".join(bytes([int(label)]) + image.transpose(2, 0, 1).tobytes() for image, label in zip(x, y))
            _add(tar, f"cifar-10-batches-bin/{name}.bin", records)
        _add(tar, "cifar-10-batches-bin/batches.meta.txt", "\n".join(f"class{i}" for i in range(10)).encode())
    return path


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


# TFDS's own cifar10 builder, except that it accepts the small archive's checksum where TFDS registers
# the official one's: its download manager, generator, writer and dataset_info are TFDS's.
_TFDS_PREPARE = textwrap.dedent("""\
    import hashlib, json, sys
    from pathlib import Path
    from tensorflow_datasets.core.download import checksums
    from tensorflow_datasets.image_classification.cifar import Cifar10
    from reprokit.kits.tensorflow_kit import tfds_data

    data_dir = Path(sys.argv[1])
    archive = data_dir / "cifar-10-binary.tar.gz"
    small = checksums.UrlInfo(size=archive.stat().st_size, checksum=hashlib.sha256(archive.read_bytes()).hexdigest(),
                              filename=archive.name)

    class SmallCifar10(Cifar10, skip_registration=True):
        name = "cifar10"
        url_infos = {"https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz": small}

    folder = tfds_data.prepare(data_dir, SmallCifar10(data_dir=str(data_dir / tfds_data.ROOT)))
    print(json.dumps({"folder": str(folder)}))
    """)


def prepare_tfds(python: Path, data_dir: Path) -> Path:
    """Run the kit's data step with TFDS's builder on the small binary archive in data_dir."""
    proc = subprocess.run([str(python), "-c", _TFDS_PREPARE, str(data_dir)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(json.loads(proc.stdout.strip().splitlines()[-1])["folder"])

"""Prepare datasets on the host as one framework-neutral, checksummed .npz each.

Kits never download or decode anything: they read the .npz that ``prepare``
wrote (``reprokit/kits/framework_free/data.py``) and check its sha256 against the spec, so both
frameworks train on the same bytes and a run needs no network.

The as-posted readers of seed 000 read CIFAR-10 as the posts did, from files prepared
here too: torchvision's reader the verified archive's extracted batches
(``cifar10_batches``), and ``tfds.load('cifar10')`` TFDS's own dataset, which a separate
data step (``reprokit/execute/data_step.py``, the only step besides the archive's download that may use
the network) builds in the TensorFlow environment.

MNIST, Fashion-MNIST and CIFAR-100, which a script loads by name, come the same way from their published
files (``reprokit/environments/published_files.py``; ``published_datasets.py`` stages one whole), and each
has its generated stand-in (``learnable-mnist`` ..., reprokit/kits/framework_free/stand_ins.py) as CIFAR-10 has
``learnable``.
"""
from __future__ import annotations

import pickle
import re
import shutil
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reprokit.environments import downloads, published_files
from reprokit.errors import UserError
from reprokit.kits.contract.files import atomic_file
from reprokit.kits.contract.named_datasets import KNOWN, Named, of_dataset
from reprokit.kits.framework_free import data as kitdata
from reprokit.kits.framework_free import stand_ins
from reprokit.results.quarantine import set_aside

DATASETS = ("cifar10", "synthetic", "learnable")

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
# Published on the dataset page and in torchvision; tests replace it with the
# md5 of a small archive in the same format.
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_FILE = "cifar10.npz"
_CIFAR10_DIR = kitdata.CIFAR10_BATCHES
_CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR10_TEST = "test_batch"

# (train, test) sizes used when a spec leaves the count as None: each named dataset's stand-in is as small as
# CIFAR-10's (``learnable``), and has its dataset's shapes.
GENERATED_SIZES = {"synthetic": (50000, 10000), **{n.stand_in: (2000, 500) for n in KNOWN.values()}}
SYNTHETIC_SHAPE = (32, 10)      # synthetic's side and classes unless the spec's differ (CIFAR-10's)

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)        # the earliest time a zip member can carry
_SHA256SUM = re.compile(r"([0-9a-f]{64})  (.+)\n")      # the sidecar's one line, as sha256sum writes it


@dataclass(frozen=True)
class PreparedDataset:
    file: str           # file name inside the cache dir
    sha256: str         # of the .npz file's bytes
    train_samples: int  # what the kit will use: min(requested, available)
    test_samples: int


def _path(data: dict[str, Any], cache_dir: Path) -> Path:
    name = data["dataset"]
    if name in KNOWN:               # a published dataset: cifar10.npz, mnist.npz, ...
        return Path(cache_dir) / f"{name}.npz"
    if name not in GENERATED_SIZES:
        raise UserError(f"Unknown dataset {name!r}: use one of {', '.join(DATASETS)}.")
    n_train, n_test = _counts_wanted(data)
    size, classes = _synthetic_shape(data)
    shape = "" if name != "synthetic" else ((f"-r{size}" if size != SYNTHETIC_SHAPE[0] else "")
                                            + (f"-c{classes}" if classes != SYNTHETIC_SHAPE[1] else ""))
    return Path(cache_dir) / f"{name}{shape}-n{n_train}-t{n_test}-s{data.get('seed', 0)}.npz"


def _synthetic_shape(data: dict[str, Any]) -> tuple[int, int]:
    """synthetic's image side and number of classes: the spec's input size where it feeds the images as they are
    (resize "none": ImageNet's 224 for ResNet-50), else CIFAR-10's 32, which the kit resizes; the spec's classes."""
    size = data.get("input_size") if data.get("resize") == "none" else None
    return int(size or SYNTHETIC_SHAPE[0]), int(data.get("num_classes") or SYNTHETIC_SHAPE[1])


def prepare(data: dict[str, Any], cache_dir: Path, *, allow_download: bool = True) -> PreparedDataset:
    """Write the dataset's .npz into cache_dir unless it is there already, and describe it."""
    path = _path(data, cache_dir)
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    if not _intact(path):
        if data["dataset"] == "cifar10":
            _write_npz(path, *_cifar10_arrays(_cifar10_archive(Path(cache_dir), allow_download)))
        elif data["dataset"] in KNOWN:
            _write_npz(path, *published_files.arrays(data["dataset"], Path(cache_dir), allow_download))
        else:
            _write_npz(path, *_generate(data["dataset"], *_counts_wanted(data), data.get("seed", 0),
                                        *_synthetic_shape(data)))
    return _describe(data, path)


def prepared(data: dict[str, Any], cache_dir: Path) -> PreparedDataset | None:
    """The dataset's description if it is already prepared, else None (a damaged file is set aside); writes and
    downloads nothing."""
    path = _path(data, cache_dir)
    return _describe(data, path) if _intact(path) else None


def expected_counts(data: dict[str, Any]) -> tuple[int, int]:
    """(train, test) samples a spec will get once its data is prepared (what a dry run plans with)."""
    return _counts_wanted(data)


def _counts_wanted(data: dict[str, Any]) -> tuple[int, int]:
    default_train, default_test = {**GENERATED_SIZES, **{n.name: n.sizes for n in KNOWN.values()}}[data["dataset"]]
    return _or_default(data.get("train_samples"), default_train), _or_default(data.get("test_samples"), default_test)


def _describe(data: dict[str, Any], path: Path) -> PreparedDataset:
    available_train, available_test = _counts(path)
    return PreparedDataset(
        file=path.name,
        sha256=_sha256_cached(path),
        train_samples=_clamp(data.get("train_samples"), available_train),
        test_samples=_clamp(data.get("test_samples"), available_test),
    )


def _or_default(requested: int | None, default: int) -> int:
    return default if requested is None else requested


def _clamp(requested: int | None, available: int) -> int:
    return available if requested is None else min(requested, available)


def _counts(path: Path) -> tuple[int, int]:
    # Only the label arrays are read: a lazy NpzFile loads members on access.
    with np.load(path, allow_pickle=False) as npz:
        return len(npz["y_train"]), len(npz["y_test"])


def _intact(path: Path) -> bool:
    """Whether a prepared dataset is at path. One that does not read (cut short by a crash or a full disk,
    another file's bytes) is set aside, so that it is prepared again rather than failing every command."""
    if not path.exists():
        return False
    try:
        _counts(path)
        return True
    # A cut-short zip has lost its central directory; other bytes fail np.load's header or pickle check.
    except (zipfile.BadZipFile, EOFError, ValueError, KeyError) as exc:
        why = "empty file" if isinstance(exc, EOFError) else f"not a readable .npz: {exc}"
    set_aside(path, f"dataset {path.name}", why, "it will be prepared again")
    return False


# --- files: atomic writes and cached checksums ---------------------------------

def _write_npz(path: Path, x_train: np.ndarray, y_train: np.ndarray,
               x_test: np.ndarray, y_test: np.ndarray) -> None:
    """An .npz np.load reads, with the same bytes on every machine for the same arrays.

    np.savez stamps each member with the time of writing, so the same data would get another
    checksum on every machine; fixed timestamps make the checksum name the data alone.
    """
    arrays = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
    with atomic_file(path, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, array in arrays.items():
            member = zipfile.ZipInfo(f"{name}.npy", date_time=ZIP_EPOCH)
            with zf.open(member, "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.ascontiguousarray(array), allow_pickle=False)


def _sha256_cached(path: Path) -> str:
    """The file's sha256, from a sidecar (sha256sum format) unless the file is newer."""
    sidecar = path.with_name(path.name + ".sha256")
    if sidecar.exists() and sidecar.stat().st_mtime_ns >= path.stat().st_mtime_ns:
        try:
            recorded = _SHA256SUM.fullmatch(sidecar.read_text())
        except ValueError:          # not UTF-8
            recorded = None
        if recorded and recorded[2] == path.name:
            return recorded[1]
        set_aside(sidecar, f"checksum {sidecar.name}", "not one sha256sum line for its file",
                  "it will be computed again")
    sha256 = downloads.file_digest(path, "sha256")
    with atomic_file(sidecar) as fh:
        fh.write(f"{sha256}  {path.name}\n")
    return sha256


# --- CIFAR-10 -------------------------------------------------------------------

def _cifar10_archive(cache_dir: Path, allow_download: bool) -> Path:
    """The official archive in cache_dir, downloaded if allowed, its md5 verified."""
    path = cache_dir / CIFAR10_ARCHIVE
    if not path.exists():
        if not allow_download:
            raise UserError(f"The CIFAR-10 archive is missing: place the official {CIFAR10_URL} "
                            f"at {path}, or allow downloads, and re-run.")
        downloads.download(CIFAR10_URL, path)
    actual = downloads.file_digest(path, "md5")
    if actual != CIFAR10_MD5:
        raise UserError(f"{path} has md5 {actual} where the official CIFAR-10 archive has "
                        f"{CIFAR10_MD5}: delete it and re-run to download it again, "
                        f"or place the official archive there.")
    return path


def cifar10_batches(cache_dir: Path, allow_download: bool) -> Path:
    """The verified archive's batches, extracted once into cache_dir for torchvision.datasets.CIFAR10,
    which checks each file's md5 itself and never downloads (the as-posted PyTorch reader)."""
    folder = Path(cache_dir) / _CIFAR10_DIR
    if not folder.is_dir():
        archive = _cifar10_archive(Path(cache_dir), allow_download)
        scratch = Path(cache_dir) / f".{_CIFAR10_DIR}.partial"
        shutil.rmtree(scratch, ignore_errors=True)
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(scratch, members=[m for m in tar if m.name.startswith(f"{_CIFAR10_DIR}/")],
                           filter="data")
        (scratch / _CIFAR10_DIR).rename(folder)       # whole or not at all
        shutil.rmtree(scratch)
    return folder


def tfds_prepared(cache_dir: Path) -> dict[str, Any] | None:
    """TFDS's cifar10 in cache_dir, as a spec names it (its folder and the sha256 of its files), or None
    where the data step has not prepared it."""
    folder = Path(cache_dir) / kitdata.TFDS_CIFAR10
    if not (folder / "dataset_info.json").exists():
        return None
    return {"dir": kitdata.TFDS_CIFAR10, "sha256": kitdata.tree_sha256(folder)}


def _cifar10_arrays(archive: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    batches = _read_batches(archive, (*_CIFAR10_TRAIN, _CIFAR10_TEST))
    train = [batches[name] for name in _CIFAR10_TRAIN]
    x_test, y_test = batches[_CIFAR10_TEST]
    return (np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]),
            x_test, y_test)


def _read_batches(archive: Path, names: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Decode the named pickled batches, read in one pass over the gzip stream."""
    wanted = {f"{_CIFAR10_DIR}/{name}": name for name in names}
    found: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with tarfile.open(archive, "r|gz") as tar:
        for member in tar:
            if member.name in wanted:
                # Unpickling is safe here only because the archive's md5 was checked.
                fh = tar.extractfile(member)
                assert fh is not None           # a regular file: the archive's md5 was checked
                batch = pickle.load(fh, encoding="bytes")
                found[wanted[member.name]] = _to_nhwc(batch)
    missing = [name for name in names if name not in found]
    if missing:
        raise UserError(f"{archive} lacks {', '.join(missing)} under {_CIFAR10_DIR}/: "
                        f"delete it and re-run, or place the official archive there.")
    return found


def _to_nhwc(batch: dict[bytes, Any]) -> tuple[np.ndarray, np.ndarray]:
    # Each row is 1024 red, then 1024 green, then 1024 blue values, each plane row-major.
    x = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(x), np.asarray(batch[b"labels"], dtype=np.int64)


# --- generated datasets ---------------------------------------------------------

def _generate(name: str, n_train: int, n_test: int, seed: int, size: int,
              classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """synthetic's noise, or a named dataset's learnable stand-in (reprokit/kits/framework_free/stand_ins.py, which a
    probed script's run also generates from). One stream each, train drawn first: the test set is independent of the
    train set yet fixed by (n_train, n_test, seed) and synthetic's shape, which the file name records."""
    if name != "synthetic":
        return stand_ins.generate(_named(name).name, n_train, n_test, seed)
    rng = np.random.default_rng(seed)
    return (*_synthetic(n_train, rng, size, classes), *_synthetic(n_test, rng, size, classes))


def _named(name: str) -> Named:
    named = of_dataset(name)
    assert named is not None, name          # _path refused every other name
    return named


def _synthetic(n: int, rng: np.random.Generator, size: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Uniform noise with random labels at the model's input size (ImageNet's shape for ResNet-50, as NVIDIA's
    synthetic-data benchmarks feed it): for throughput only, there is nothing to learn."""
    return (rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8),
            rng.integers(0, classes, n, dtype=np.int64))

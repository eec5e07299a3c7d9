"""The posted TensorFlow input, ``tfds.load('cifar10')``, and the separate data step that prepares it.

The data step (``python -m reprokit.kits.tensorflow_kit.tfds_data --data-dir DIR [--out OUT]``, started by a
runner like every kit process) runs before and outside any timed run, and may use the network: TFDS's
own cifar10 builder fetches the binary archive (or takes ``cifar-10-binary.tar.gz`` placed in DIR),
checks it against the checksum TFDS registers for it, and writes its dataset under OUT/tfds (DIR/tfds
without --out); the host moves it into DIR. A run only reads that dataset, after checking its files
against the sha256 its spec names; it never downloads.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow_datasets as tfds  # noqa: E402

from reprokit.kits.framework_free import data as datalib  # noqa: E402

ROOT, DATASET = datalib.TFDS_ROOT, datalib.TFDS_CIFAR10
NAME, VERSION = Path(DATASET).parts[1:]


def prepare(data_dir: Path, builder=None, out: Path | None = None) -> Path:
    """TFDS's cifar10, prepared under out/tfds (data_dir/tfds without ``out``) by its own builder from the
    archive in data_dir; returns the dataset's folder.

    ``builder`` is TFDS's registered cifar10 builder unless given (the tests give one that accepts
    their small archive's checksum; everything else is TFDS's own code)."""
    out = out or data_dir
    builder = builder or tfds.builder(NAME, data_dir=str(out / ROOT))
    if str(builder.version) != VERSION:
        raise RuntimeError(f"tensorflow-datasets {tfds.__version__} builds {NAME} {builder.version}, not {VERSION}: "
                           f"install the version of the TensorFlow lock file")
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        manual_dir=str(data_dir), try_download_gcs=False))
    return out / DATASET


def load(data_dir: Path, folder: str, sha256: str, train_samples: int, test_samples: int):
    """(train, test) as the post loads them, ``tfds.load('cifar10', split=['test', 'train'])``, from the
    prepared folder the spec names (its files checked first), cut to the spec's sample counts."""
    datalib.verified_folder(data_dir / folder, sha256)
    ds_test, ds_train = tfds.load(NAME, split=["test", "train"], data_dir=str(data_dir / ROOT), download=False,
                                  try_gcs=False)
    return ds_train.take(train_samples), ds_test.take(test_samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reprokit.kits.tensorflow_kit.tfds_data",
                                     description="Prepare TFDS's cifar10 (the posted TensorFlow input) under DIR/tfds.")
    parser.add_argument("--data-dir", required=True, type=Path, help="where the archive is (read only)")
    parser.add_argument("--out", type=Path, help="where to write tfds/ (default: the data folder)")
    args = parser.parse_args(argv)
    folder = prepare(args.data_dir, out=args.out)
    print(f"tfds: {NAME} {VERSION} prepared in {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

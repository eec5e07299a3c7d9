"""Keras's and TFDS's named datasets served from the run's data, and every other download refused in one sentence.

``keras.datasets.mnist / fashion_mnist / cifar100.load_data()`` (``tf.keras.datasets`` too) run as Keras wrote
them, on the run's files of the dataset in Keras's own formats (kits/training_loop/staged_data.py): their ``get_file``
gives the run's file instead of fetching it. CIFAR-10's load_data expects the published 50,000 training
images, so it is replaced by a reader of the run's batches with Keras's own load_batch. ``tfds.load`` of the four
reads TFDS's own prepared datasets (kits/training_loop/tfds_named.py). Anything
else Keras would download (another dataset, ``keras.applications``' pretrained weights) is refused, naming the
file, unless it is in Keras's cache already.
"""
from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import numpy as np

from kits.contract.named_datasets import KNOWN, not_provided
from kits.training_loop import tfds_named
from kits.training_loop.staged_data import NotProvided, StagedData, replace_everywhere


def install(named: StagedData, tfds_root: Path | None) -> list[str]:
    """Serve the named datasets through Keras and TFDS and refuse other downloads; the shims' declarations."""
    from keras.src.datasets import cifar10, cifar100, fashion_mnist, mnist
    from keras.src.utils import file_utils

    def serving(name: str):
        def get_file(fname=None, origin=None, *args, **kwargs):
            path = named.keras_file(name)
            return str(path / fname if name == "fashion_mnist" else path)
        return get_file
    for module in (mnist, fashion_mnist, cifar100):
        module.get_file = serving(module.__name__.rsplit(".", 1)[1])

    def load_data():
        (x_train, y_train), (x_test, y_test) = _batches(named.cifar("cifar10"))
        return (x_train, y_train.astype("uint8").reshape(-1, 1)), (x_test, y_test.astype("uint8").reshape(-1, 1))
    replace_everywhere("keras", cifar10.load_data, load_data)

    def urlretrieve(url, filename=None, *args, **kwargs):
        raise NotProvided(not_provided(os.path.basename(urllib.parse.urlparse(url).path), url))
    file_utils.urlretrieve = urlretrieve
    names = ", ".join(n.keras for n in KNOWN.values())
    return [f"keras.datasets' {names} load_data() read the run's files of the dataset in Keras's own formats "
            f"(CIFAR-10's batches with Keras's load_batch); they never download, and other downloads (datasets, "
            f"pretrained weights) are refused, naming the file", *tfds_named.install(named, tfds_root)]


def _batches(folder: Path):
    """((x_train, y_train), (x_test, y_test)) of CIFAR-10's python batches, NHWC, read with Keras's load_batch."""
    from keras.src.datasets import cifar10
    parts = [cifar10.load_batch(str(folder / f"data_batch_{i}")) for i in range(1, 6)]
    x_test, y_test = cifar10.load_batch(str(folder / "test_batch"))
    return ((np.concatenate([x for x, _ in parts]).transpose(0, 2, 3, 1),
             np.concatenate([np.asarray(y) for _, y in parts]).astype(np.int64)),
            (x_test.transpose(0, 2, 3, 1), np.asarray(y_test, np.int64)))

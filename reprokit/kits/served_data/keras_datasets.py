"""Keras's named datasets served from the run's data, its get_file of the published files by URL, and every other
download refused in one sentence.

``keras.datasets.mnist / fashion_mnist / cifar100.load_data()`` (``tf.keras.datasets`` too) run as Keras wrote
them, on the run's files of the dataset in Keras's own formats (reprokit/kits/training_loop/staged_data.py): their
``get_file`` gives the run's file instead of fetching it. CIFAR-10's load_data expects the published 50,000 training
images, so it is replaced by a reader of the run's batches with Keras's own load_batch. A script's own
``keras.utils.get_file`` of a listed URL (reprokit/kits/contract/published_urls.py) runs as Keras wrote it, its download
the run's file (urls.py), its ``file_hash`` checked by Keras (digests.py), in a cache of the run's own where the script
names none. Anything else Keras would download (another dataset, ``keras.applications``' pretrained weights) is
refused, naming the file, unless it is in Keras's cache already. Installed wherever a script imports keras.
"""
from __future__ import annotations

import inspect
import os
import urllib.parse
from pathlib import Path

import numpy as np

from reprokit.kits.contract import published_urls
from reprokit.kits.contract.named_datasets import KNOWN, not_provided
from reprokit.kits.served_data import urls
from reprokit.kits.training_loop.staged_data import NotProvided, StagedData, replace_everywhere


def install(named: StagedData) -> list[str]:
    """Serve the named datasets and the listed URLs through Keras, and refuse other downloads; the shims'
    declarations."""
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
    _serve_get_file(named, file_utils)
    names = ", ".join(n.keras for n in KNOWN.values())
    return [f"keras.datasets' {names} load_data() read the run's files of the dataset in Keras's own formats "
            f"(CIFAR-10's batches with Keras's load_batch); they never download, and other downloads (datasets, "
            f"pretrained weights) are refused, naming the file",
            f"keras.utils.get_file of a published file by URL downloads the run's file (Keras checks its file_hash), "
            f"into {named.staged / 'keras'} where the script names no cache_dir"]


def _serve_get_file(named: StagedData, file_utils) -> None:
    """get_file's download (its urlretrieve) gives the run's file for a listed URL and refuses any other; its
    default cache, for a listed URL, is the run's own (a stand-in left in ~/.keras would outlive the run)."""
    real_retrieve, real_get_file = file_utils.urlretrieve, file_utils.get_file
    parameters = inspect.signature(real_get_file)

    def urlretrieve(url, filename=None, *args, **kwargs):
        if published_urls.published(url) is None:
            raise NotProvided(published_urls.not_listed(url) if published_urls.in_listed_folder(url)
                              else not_provided(os.path.basename(urllib.parse.urlparse(url).path), url))
        return urls.retrieve(named, url, filename, real_retrieve, *args, **kwargs)
    file_utils.urlretrieve = urlretrieve

    def get_file(*args, **kwargs):
        call = parameters.bind(*args, **kwargs)
        if call.arguments.get("cache_dir") is None and published_urls.published(call.arguments.get("origin") or ""):
            (named.staged / "keras").mkdir(exist_ok=True)     # Keras takes /tmp/.keras for a folder not there
            call.arguments["cache_dir"] = str(named.staged / "keras")
        return real_get_file(*call.args, **call.kwargs)
    file_utils.get_file = get_file
    replace_everywhere("keras", real_get_file, get_file)


def _batches(folder: Path):
    """((x_train, y_train), (x_test, y_test)) of CIFAR-10's python batches, NHWC, read with Keras's load_batch."""
    from keras.src.datasets import cifar10
    parts = [cifar10.load_batch(str(folder / f"data_batch_{i}")) for i in range(1, 6)]
    x_test, y_test = cifar10.load_batch(str(folder / "test_batch"))
    return ((np.concatenate([x for x, _ in parts]).transpose(0, 2, 3, 1),
             np.concatenate([np.asarray(y) for _, y in parts]).astype(np.int64)),
            (x_test.transpose(0, 2, 3, 1), np.asarray(y_test, np.int64)))

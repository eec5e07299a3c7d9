"""Loads the four named datasets through one framework's own APIs under the probe's data layer, as a script would.

    PYTHONPATH=REPO KIT_PYTHON tests/named_data_driver.py pytorch|tensorflow DATA_DIR SPEC_DATA_JSON

Run by tests/test_named_data.py in each framework's real environment: the network guard and the common data
layer (reprokit/kits/served_data) installed as every probe installs them (torchvision imported after it, as a script
imports it; Keras before it, as the TensorFlow probe imports it), each dataset loaded from another root, and
the downloads the kit cannot serve tried. Prints one JSON line: what each API gave, the refusals, the shims,
the addresses the script tried to reach, and the roots given that exist once the four are loaded (none should:
each class reads the run's own folder).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from reprokit.kits import served_data
from reprokit.kits.contract.spec import ScriptData
from reprokit.kits.training_loop.network_guard import block_network
from reprokit.kits.training_loop.staged_data import NotProvided, StagedData

framework, data_dir, spec_data = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
tried: list[str] = []
shims = [block_network(tried)]
work = Path(tempfile.mkdtemp()) / "work"
(work / "sub").mkdir(parents=True)
os.chdir(work / "sub")
named = StagedData(ScriptData(**spec_data), data_dir, work, shims)
roots = ["./data", "../data", "data", str(work.parent / "elsewhere")]      # relative, above, bare, absolute
loaded: dict[str, dict] = {}
refused: dict[str, str] = {}


def seen(x, y, image_mode=None) -> dict:
    x, y = np.asarray(x), np.asarray(y).reshape(-1)
    return {"shape": list(x.shape), "dtype": str(x.dtype), "classes": int(len(np.unique(y))), "mode": image_mode}


def refuse(what: str, call) -> None:
    try:
        call()
    except NotProvided as exc:
        refused[what] = str(exc)


if framework == "pytorch":
    shims += served_data.install(named, None)
    from torchvision import datasets, models
    for root, name in zip(roots, ("MNIST", "FashionMNIST", "CIFAR10", "CIFAR100")):
        train = getattr(datasets, name)(root, train=True, download=True)
        test = getattr(datasets, name)(root=root, train=False)
        loaded[name] = {"train": seen(train.data, train.targets, train[0][0].mode), "test": len(test)}
    roots_made = [r for r in roots if Path(r).exists()]
    refuse("SVHN", lambda: datasets.SVHN(roots[0], split="train", download=True))
    refuse("KMNIST", lambda: datasets.KMNIST(roots[1], download=True))
    refuse("resnet18", lambda: models.resnet18(weights="IMAGENET1K_V1"))
else:
    import keras
    import tensorflow as tf
    from tensorflow.keras import datasets as tf_datasets
    shims += served_data.install(named, None)
    for name, load in (("mnist", keras.datasets.mnist.load_data), ("fashion_mnist", tf.keras.datasets.fashion_mnist.load_data),
                       ("cifar10", tf_datasets.cifar10.load_data), ("cifar100", keras.datasets.cifar100.load_data)):
        (x, y), (x_test, _) = load()
        loaded[name] = {"train": seen(x, y), "test": len(x_test), "label_dtype": str(y.dtype)}
    (_, coarse), _ = keras.datasets.cifar100.load_data(label_mode="coarse")
    loaded["cifar100"]["coarse_classes"] = int(len(np.unique(coarse)))
    roots_made = [r for r in roots if Path(r).exists()]
    refuse("imdb", keras.datasets.imdb.load_data)
    refuse("ResNet50", lambda: keras.applications.ResNet50(weights="imagenet"))

print(json.dumps({"loaded": loaded, "refused": refused, "shims": shims, "tried": tried,
                  "roots_made": roots_made}))

"""Reads the four named datasets with TFDS's own tfds.load under the probe's data layer, as a script would.

    PYTHONPATH=REPO KIT_PYTHON tests/tfds_named_driver.py STAND_IN_DIR STAND_IN_SPEC_JSON POSTED_DIR POSTED_SPEC_JSON

Run by tests/test_tfds_named.py in an environment with tensorflow_datasets. First CIFAR-10's verified data
(small archives in both official formats): the dataset written from its python batches against TFDS's own
builder's, made by the data step from the binary archive. Then the stand-ins (a quick run that loads MNIST)
with the probe's data layer installed: each name through tfds.load with a sliced split, as_supervised and
with_info, and whole with batch_size=-1.
Prints one JSON line.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from reprokit.kits import served_data
from reprokit.kits.contract.spec import ScriptData
from reprokit.kits.served_data import tfds_datasets
from reprokit.kits.training_loop.network_guard import block_network
from reprokit.kits.training_loop.staged_data import StagedData

stand_in_dir, stand_in_spec, posted_dir, posted_spec = sys.argv[1:5]
# CIFAR-10's verified data: written here from the python batches, and TFDS's own build from the binary archive
# (before install(), which points tfds.builder at the run's copies)
posted = StagedData(ScriptData(**json.loads(posted_spec)), Path(posted_dir), Path("posted-work").resolve(), [])
ours = tfds_datasets.prepare(posted, "cifar10", posted.staged / "tfds")
theirs = tfds.builder("cifar10", data_dir=str(Path(posted_dir) / "tfds"))
same = {}
for split in ("train", "test"):
    a, b = (list(tfds.as_numpy(x.as_dataset(split=split))) for x in (ours, theirs))
    same[split] = len(a) == len(b) > 0 and all(x["id"] == y["id"] and x["label"] == y["label"]
                                               and np.array_equal(x["image"], y["image"]) for x, y in zip(a, b))
same["names"] = ours.info.features["label"].names == theirs.info.features["label"].names

tried: list[str] = []
shims = [block_network(tried)]
named = StagedData(ScriptData(**json.loads(stand_in_spec)), Path(stand_in_dir), Path("stand-in-work").resolve(), shims)
shims += served_data.install(named, None)      # TFDS is imported: its layer at once
loaded = {}
for name in ("mnist", "fashion_mnist", "cifar10", "cifar100"):
    (train, test), info = tfds.load(name, split=["train[:90%]", "test"], as_supervised=True, with_info=True,
                                    data_dir="~/somewhere")       # where TFDS would look: the run's copy instead
    image, label = train.element_spec
    whole = tfds.load(name, split="test", batch_size=-1)
    loaded[name] = {"train": int(train.cardinality()), "test": int(test.cardinality()),
                    "splits": {s: info.splits[s].num_examples for s in info.splits},
                    "image": [list(image.shape), image.dtype.name], "label": label.dtype.name,
                    "classes": info.features["label"].num_classes, "version": str(info.version),
                    "batched": {k: list(v.shape) for k, v in whole.items()},
                    "seen_classes": len(np.unique(tfds.as_numpy(whole)["label"])), "data_dir": info.data_dir}
loaded["cifar100"]["coarse"] = len(np.unique(tfds.as_numpy(whole)["coarse_label"]))
built = tfds.builder("cifar10").as_dataset(split="test")          # tfds.builder reads the same copy
loaded["cifar10"]["builder"] = int(built.cardinality())

print(json.dumps({"loaded": loaded, "shims": shims, "tried": tried, "same_as_tfds": same}))

"""``tfds.load('mnist')`` (fashion_mnist, cifar10, cifar100 too) on the run's data, as TFDS's own prepared dataset.

TFDS would download the published files and prepare them; a run has no network. Here TFDS's own registered
builder of the dataset writes its prepared format (its tfrecords, dataset_info.json) under the run's work
folder when the script first asks for the dataset, fed the examples TFDS's generator would yield from the
published files (the same keys, so the same order after TFDS's shuffle; CIFAR's ids and label names), read
from the run's data: the generated stand-in on quick, the verified dataset otherwise. tfds.load then reads
it itself, so splits (``train[:90%]``), as_supervised, with_info and batch_size=-1 behave as TFDS's do.
CIFAR-10 reads the dataset the data step prepared where there is one (reprokit/kits/tensorflow_kit/tfds_data.py).
Installed wherever a script imports tensorflow_datasets (reprokit/kits/served_data/__init__.py): in the TensorFlow
environment, and in the JAX one where a script's requirements bring it.
"""
from __future__ import annotations

import importlib
import importlib.util
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from reprokit.kits.contract.named_datasets import CIFAR_FOLDERS, KNOWN
from reprokit.kits.training_loop.staged_data import NotProvided, StagedData

Examples = dict[str, Iterator[tuple[Any, dict[str, Any]]]]
# Each split's files of CIFAR's python version, in the order TFDS's builder reads their binary twins, and each
# label feature's (column, names in the meta file)
_CIFAR_FILES = {"cifar10": {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]},
                "cifar100": {"train": ["train"], "test": ["test"]}}
_CIFAR_LABELS = {"cifar10": {"label": (b"labels", b"label_names")},
                 "cifar100": {"label": (b"fine_labels", b"fine_label_names"),
                              "coarse_label": (b"coarse_labels", b"coarse_label_names")}}


def _unpickled(path: Path) -> dict[bytes, Any]:
    with path.open("rb") as f:
        out: dict[bytes, Any] = pickle.load(f, encoding="bytes")
    return out


def _cifar(folder: Path, name: str) -> tuple[Examples, dict[str, list[str]]]:
    """CIFAR's examples from its python-version folder, as TFDS's Cifar10._generate_examples yields them from the
    binary version (key = index within the split, id = ``train_00042``), and its label names."""
    labels = _CIFAR_LABELS[name]
    meta = _unpickled(folder / ("batches.meta" if name == "cifar10" else "meta"))
    names = {key: [n.decode() for n in meta[names_key]] for key, (_, names_key) in labels.items()}

    def split(which: str) -> Iterator[tuple[Any, dict[str, Any]]]:
        index = 0
        for file in _CIFAR_FILES[name][which]:
            batch = _unpickled(folder / file)
            images = np.asarray(batch[b"data"], np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
            for i, image in enumerate(images):
                record = {key: int(batch[column][i]) for key, (column, _) in labels.items()}
                yield index, {**record, "id": f"{which}_{index:05d}", "image": image}
                index += 1
    return {"train": split("train"), "test": split("test")}, names


def _mnist(named: StagedData, name: str) -> Examples:
    """MNIST's kind: TFDS's MNIST._generate_examples yields (index, {image HxWx1, label}) in the files' order."""
    arrays = named.arrays(name)

    def split(x: np.ndarray, y: np.ndarray) -> Iterator[tuple[Any, dict[str, Any]]]:
        for index, (image, label) in enumerate(zip(x, y)):
            yield index, {"image": image[..., None], "label": int(label)}
    return {"train": split(arrays.x_train, arrays.y_train), "test": split(arrays.x_test, arrays.y_test)}


def prepare(named: StagedData, name: str, root: Path) -> Any:
    """TFDS's ``name`` prepared under root by its own registered builder from the run's data; the builder."""
    tfds = importlib.import_module("tensorflow_datasets")
    # TFDS's own function, which install() does not replace (tfds.builder is its name for it)
    builder = importlib.import_module("tensorflow_datasets.core.load").builder(name, data_dir=str(root))
    if name in CIFAR_FOLDERS:
        examples, label_names = _cifar(named.cifar(name), name)
        for key, values in label_names.items():     # as TFDS's builder sets them from the label files
            builder.info.features[key].names = values
    else:
        examples = _mnist(named, name)
    # The one hook: the builder's split generators give the run's examples instead of downloading; TFDS's own
    # code encodes, shuffles, shards and writes them, and its dataset_info.json.
    builder._split_generators = lambda dl_manager: examples
    bars = importlib.import_module("tensorflow_datasets.core.utils.tqdm_utils")
    shown = bars._active
    tfds.display_progress_bar(False)
    try:
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
            try_download_gcs=False, compute_stats=tfds.download.ComputeStatsMode.SKIP))
    finally:
        tfds.display_progress_bar(shown)
    return builder


def install(named: StagedData, tfds_root: Path | None) -> list[str]:
    """``tfds.load`` and ``tfds.builder`` of the four datasets read their prepared datasets from the run's data;
    the shims' declarations."""
    tfds = importlib.import_module("tensorflow_datasets")
    real_load, real_builder, root, ready = tfds.load, tfds.builder, named.staged / "tfds", set()

    def data_dir(name: object) -> str | None:
        base = str(name).split(":")[0]              # 'mnist:3.*.*': TFDS checks the version itself
        if base not in KNOWN:
            return None
        if base == "cifar10" and tfds_root is not None:
            return str(tfds_root)
        if base not in ready:
            if importlib.util.find_spec("tensorflow") is None:     # TFDS writes and reads its format with TF
                raise NotProvided(f"the script loads '{base}' through tensorflow_datasets, which needs TensorFlow to "
                                  f"prepare and read it, and its packages bring none: add tensorflow-cpu to its "
                                  f"requirements (--require)")
            built = prepare(named, base, root)
            ready.add(base)
            named.declared.append(_declaration(named, base, built))
        return str(root)

    def load(name: Any, *args: Any, **kwargs: Any) -> Any:
        where = data_dir(name)
        if where:
            kwargs.update(data_dir=where, download=False, try_gcs=False)
        return real_load(name, *args, **kwargs)

    def builder(name: Any, *args: Any, **kwargs: Any) -> Any:
        where = data_dir(name)
        if where:
            kwargs.update(data_dir=where)
        return real_builder(name, *args, **kwargs)
    setattr(tfds, "load", load)                   # noqa: B010 (mypy sees no such attribute: TFDS is imported by name)
    setattr(tfds, "builder", builder)             # noqa: B010
    served = ", ".join(f"'{n}'" for n in KNOWN)
    where = "; cifar10 reads the dataset the data step prepared, checked against the spec" if tfds_root else ""
    return [f"tfds.load and tfds.builder of {served} read TFDS's own prepared datasets, written by TFDS's builders "
            f"in the run from the run's data when first asked for (they never download){where}"]


def _declaration(named: StagedData, name: str, builder: Any) -> str:
    title, splits = KNOWN[name].title, builder.info.splits
    counts = f"{splits['train'].num_examples} training, {splits['test'].num_examples} test images"
    made = f"as TFDS's prepared {name} {builder.version}, written in the run by TFDS's own builder"
    return (f"the generated {title} stand-in ({counts}) {made}, not {title}" if named.stand_in
            else f"{title} ({counts}) {made} from the verified data")

"""The datasets a script loads by name: MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100, where each API looks.

- In each library's real environment, one process loads all four through the library's own APIs (torchvision's
  classes, Keras's load_data) with the probe's data layer installed (reprokit/kits/served_data), from different roots, and
  tries what the kit cannot serve (another dataset, pretrained weights): shapes, classes, declarations, refusals, no
  network. The published files by URL: tests/test_served_urls.py.
- On the host: the stand-ins' shapes and signal; the plan's reading of a folder's code; ``reprokit data NAME``
  fetching the published files from an HTTP server on this machine's loopback (small files in the datasets' own
  formats, whose md5s replace the published ones), and a standard run's data layer reading what it staged.
- One script of the corpus, end to end through the CLI on the quick profile.
"""
from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import http.server
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
from checkout import REPO

from reprokit import cli
from reprokit.environments import datasets
from reprokit.kits.contract.named_datasets import IDX_FILES, KNOWN
from reprokit.kits.contract.published_urls import not_listed
from reprokit.kits.contract.spec import ScriptData
from reprokit.kits.framework_free import dataset_formats as formats
from reprokit.kits.framework_free import stand_ins
from reprokit.kits.framework_free.data import Arrays
from reprokit.kits.training_loop.staged_data import NotProvided, StagedData
from reprokit.plan import script_datasets

TITLES = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}
SHAPES = {"mnist": [28, 28], "fashion_mnist": [28, 28], "cifar10": [32, 32, 3], "cifar100": [32, 32, 3]}
CLASSES = {"mnist": 10, "fashion_mnist": 10, "cifar10": 10, "cifar100": 100}
TORCHVISION = {n.name: n.torchvision for n in KNOWN.values()}
REFUSED_DATASET = ("the script fetches train_32x32.mat (http://ufldl.stanford.edu/housenumbers/train_32x32.mat), which "
                   "the kit cannot provide (a run has no network, and the kit serves only MNIST, Fashion-MNIST, "
                   "CIFAR-10 and CIFAR-100, staged with `nox -s data -- NAME`): mount your own copy of the dataset "
                   "with --data")
REFUSED_WEIGHTS = ("the script fetches the pretrained weights resnet18-f37072fd.pth "
                   "(https://download.pytorch.org/models/resnet18-f37072fd.pth), which the kit cannot provide (a run "
                   "has no network): mount your own copy with --data")


@pytest.fixture(scope="module")
def stand_in_data(tmp_path_factory) -> tuple[Path, dict]:
    """A quick run's data for a script that loads MNIST: its stand-in, prepared and checksummed by the host."""
    folder = tmp_path_factory.mktemp("named")
    prepared = datasets.prepare({"dataset": "learnable-mnist", "train_samples": 300, "test_samples": 100,
                                 "seed": 0}, folder)
    return folder, {"dataset": "learnable-mnist", "file": prepared.file, "sha256": prepared.sha256,
                    "train_samples": 300, "test_samples": 100, "tfds": None}


def _drive(kit_python, framework: str, stand_in_data, tmp_path: Path) -> dict:
    data_dir, spec_data = stand_in_data
    # empty caches: a weights file cached on this machine would load, and the test would not see the refusal
    env = {**os.environ, "PYTHONPATH": str(REPO), "TORCH_HOME": str(tmp_path / "torch"),
           "KERAS_HOME": str(tmp_path / "keras")}
    proc = subprocess.run([str(kit_python(framework)), str(REPO / "tests" / "named_data_driver.py"), framework,
                           str(data_dir), json.dumps(spec_data)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _declared(out: dict) -> None:
    for title in TITLES.values():
        assert f"the generated {title} stand-in (300 training, 100 test images) in {title}'s file format, not {title}" \
            in out["shims"]
    assert out["tried"] == [] and out["roots_made"] == []          # no network, nothing where the script pointed


def test_torchvision_loads_each_named_dataset_from_any_root_and_refuses_the_rest(kit_python, stand_in_data, tmp_path):
    out = _drive(kit_python, "pytorch", stand_in_data, tmp_path)
    for name in TITLES:
        seen = out["loaded"][TORCHVISION[name]]
        assert seen["train"] == {"shape": [300, *SHAPES[name]], "dtype": "uint8", "classes": CLASSES[name],
                                 "mode": "L" if name.endswith("mnist") else "RGB"} and seen["test"] == 100, name
    _declared(out)
    assert out["refused"]["SVHN"] == REFUSED_DATASET
    assert out["refused"]["KMNIST"].startswith("the script fetches train-images-idx3-ubyte.gz (http://codh.rois.ac.jp")
    assert out["refused"]["resnet18"] == REFUSED_WEIGHTS


def test_keras_loads_each_named_dataset_in_its_own_format_and_refuses_the_rest(kit_python, stand_in_data, tmp_path):
    out = _drive(kit_python, "tensorflow", stand_in_data, tmp_path)
    for name in TITLES:
        seen = out["loaded"][name]
        assert seen["train"]["shape"] == [300, *SHAPES[name]] and seen["train"]["dtype"] == "uint8", name
        assert seen["train"]["classes"] == CLASSES[name] and seen["test"] == 100, name
    assert out["loaded"]["mnist"]["label_dtype"] == "uint8" and out["loaded"]["cifar100"]["coarse_classes"] == 20
    _declared(out)
    # Keras's imdb.npz lives beside mnist.npz on Keras's mirror, whose listed files alone are served
    assert out["refused"]["imdb"] == not_listed("https://storage.googleapis.com/tensorflow/tf-keras-datasets/imdb.npz")
    assert out["refused"]["ResNet50"].startswith("the script fetches the pretrained weights "
                                                 "resnet50_weights_tf_dim_ordering_tf_kernels.h5 (")


# --- the stand-ins and the plan ---------------------------------------------------------------------------

def _spectrum(x: np.ndarray) -> np.ndarray:
    """Phase-invariant features: the normalised amplitude spectrum of the grey image."""
    grey = x.astype(np.float32).mean(axis=-1) if x.ndim == 4 else x.astype(np.float32)
    amplitude = np.abs(np.fft.rfft2(grey - grey.mean(axis=(1, 2), keepdims=True))).reshape(len(x), -1)
    return amplitude / np.linalg.norm(amplitude, axis=1, keepdims=True)


@pytest.mark.parametrize("name, labels", [("mnist", lambda y: y), ("cifar100", lambda y: y // 5)])
def test_a_stand_in_has_its_datasets_shapes_and_a_signal_a_simple_classifier_finds(name, labels):
    x_train, y_train, x_test, y_test = stand_ins.generate(name, 2000, 500, 0)
    assert x_train.dtype == np.uint8 and x_train.shape[1:] == tuple(SHAPES[name]) and y_train.dtype == np.int64
    assert np.bincount(y_train, minlength=CLASSES[name]).tolist() == [2000 // CLASSES[name]] * CLASSES[name]
    same = stand_ins.generate(name, 2000, 500, 0)
    assert all(np.array_equal(a, b) for a, b in zip(same, (x_train, y_train, x_test, y_test)))
    # orientation, which a grey spectrum sees, sets MNIST's class and CIFAR-100's coarse one (fine // 5)
    train, test, y_train, y_test = _spectrum(x_train), _spectrum(x_test), labels(y_train), labels(y_test)
    means = np.stack([train[y_train == c].mean(axis=0) for c in range(y_train.max() + 1)])
    assert (((test[:, None, :] - means[None]) ** 2).sum(axis=-1).argmin(axis=1) == y_test).mean() > 0.5
    assert not np.array_equal(stand_ins.generate("fashion_mnist", 20, 5, 0)[0], stand_ins.generate("mnist", 20, 5, 0)[0])


def test_the_plan_reads_the_datasets_a_folder_loads_from_its_code(tmp_path):
    (tmp_path / "train.py").write_text(
        '"""Like the MNIST example, on CIFAR-100."""\n'           # prose is not code
        "import torchvision\n"
        "from torchvision.datasets import FashionMNIST  # datasets.CIFAR100 in a comment\n"
        "name = 'cifar10'\n"
        "data = torchvision.datasets.MNIST('./data', download=True)\n")
    (tmp_path / "helpers.py").write_text("import keras\nfrom tensorflow.keras.datasets import cifar100\n"
                                         "args_mnist = args.mnist\nx = keras.datasets.cifar10.load_data()\n")
    (tmp_path / "broken.py").write_text("def (:\n")
    found = script_datasets.loaded(tmp_path, "train.py")
    assert found == ["fashion_mnist", "mnist", "cifar100", "cifar10"]
    assert script_datasets.planned(found, "quick") == "learnable-fashion_mnist"
    assert script_datasets.planned(found, "standard") == "fashion_mnist"
    assert script_datasets.planned(["cifar10", "mnist"], "standard") is None       # CIFAR-10: as before
    assert script_datasets.loaded(tmp_path, "helpers.py")[:2] == ["cifar100", "cifar10"]


# --- the published files, staged through a server on the loopback ---------------------------------------------

def _published(folder: Path) -> dict[str, dict[str, bytes]]:
    """Small MNIST and CIFAR-100 in their published files' formats, from the stand-ins' generator."""
    mnist = Arrays(*stand_ins.generate("mnist", 30, 10, 7), sha256="")
    parts = dict(zip(IDX_FILES, (mnist.x_train, mnist.y_train, mnist.x_test, mnist.y_test)))
    cifar = Arrays(*stand_ins.generate("cifar100", 200, 100, 7), sha256="")
    extracted = formats.write_cifar100(cifar, folder)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        tar.add(extracted, arcname=extracted.name)
    return {"mnist": {f"{name}.gz": gzip.compress(formats.idx(part)) for name, part in parts.items()},
            "cifar100": {"cifar-100-python.tar.gz": archive.getvalue()}}


@pytest.fixture
def loopback(tmp_path, monkeypatch):
    """An HTTP server on 127.0.0.1 serving the small files, which the datasets' table points at with their md5s."""
    served = tmp_path / "served"
    files = _published(tmp_path / "made")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    for name, named in files.items():
        (served / name).mkdir(parents=True)
        for file, payload in named.items():
            (served / name / file).write_bytes(payload)
        md5s = tuple((file, hashlib.md5(payload).hexdigest()) for file, payload in named.items())
        monkeypatch.setitem(KNOWN, name, dataclasses.replace(
            KNOWN[name], url=f"http://127.0.0.1:{server.server_port}/{name}/", files=md5s))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield files
    server.shutdown()


def test_reprokit_data_stages_the_published_files_and_a_standard_run_reads_them(loopback, tmp_path, capsys):
    data_dir = tmp_path / "data"
    assert cli.main(["data", "--data-dir", str(data_dir), "MNIST", "cifar-100"]) == 0
    out = capsys.readouterr().out
    assert "data: MNIST in " in out and "mnist.npz (sha256 " in out and "and MNIST/raw/" in out
    assert "cifar100.npz" in out and "cifar-100-python/" in out
    assert (data_dir / "MNIST" / "raw" / "train-images-idx3-ubyte.gz").read_bytes() == \
        loopback["mnist"]["train-images-idx3-ubyte.gz"]
    # a standard run of a script that loads MNIST, and CIFAR-100 as well
    prepared = datasets.prepared({"dataset": "mnist", "train_samples": None, "test_samples": None}, data_dir)
    shims: list[str] = []
    named = StagedData(ScriptData("mnist", prepared.file, prepared.sha256, 30, 10), data_dir, tmp_path / "work", shims)
    raw = named.torchvision_root("mnist", "MNIST") / "MNIST" / "raw"
    for file in IDX_FILES:       # the files torchvision reads: the published bytes, written from the verified arrays
        assert (raw / file).read_bytes() == gzip.decompress(loopback["mnist"][f"{file}.gz"]), file
    assert shims == ["MNIST (30 training, 10 test images) from the verified arrays, written in MNIST's idx files"]
    assert named.cifar("cifar100").resolve() == (data_dir / "cifar-100-python").resolve()    # published files, linked
    assert named.arrays("cifar100").y_train.max() == 99 and named.classes == 10
    with pytest.raises(NotProvided, match=r"^the script loads Fashion-MNIST, which is not prepared in .*: stage it "
                                          r"with `nox -s data -- fashion_mnist` and run again$"):
        named.keras_file("fashion_mnist")


def _refusal(argv: list[str], capsys) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err[len("error: "):].strip()


def test_a_published_file_that_is_not_the_published_one_or_missing_offline_is_refused(loopback, tmp_path, capsys):
    data_dir = tmp_path / "data"
    (data_dir / "MNIST" / "raw").mkdir(parents=True)
    (data_dir / "MNIST" / "raw" / "train-images-idx3-ubyte.gz").write_bytes(b"not it")
    wrong = _refusal(["data", "--data-dir", str(data_dir), "mnist"], capsys)
    assert wrong.startswith(f"{data_dir}/MNIST/raw/train-images-idx3-ubyte.gz has md5 ") and \
        "where the published MNIST train-images-idx3-ubyte.gz has " in wrong and "delete it and re-run" in wrong
    assert not (data_dir / "mnist.npz").exists()
    assert _refusal(["data", "--data-dir", str(data_dir), "--offline", "cifar100"], capsys).startswith(
        "CIFAR-100's cifar-100-python.tar.gz is missing: stage it with `nox -s data -- cifar100` (or place the "
        "published http://127.0.0.1:")
    assert _refusal(["data", "--data-dir", str(data_dir), "svhn"], capsys) == (
        "reprokit data: the kit stages MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100, not 'svhn': name one of them, "
        "or mount your own data with --data")


# --- end to end ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_pytorch_mnist_example_runs_unmodified_on_mnists_stand_in(kit_python, tmp_path):
    """The corpus's argparse MNIST example (``../data``, a 1-channel CNN), through the CLI on quick."""
    kit_python("pytorch")
    state = tmp_path / "state"
    proc = subprocess.run([sys.executable, "-m", "reprokit", "reproduce", "--script",
                           f"pytorch={REPO / 'tests' / 'corpus' / 'mnist_examples' / 'main.py'}", "--frameworks",
                           "pytorch", "--backend", "local", "--profile", "quick", "--state-dir", str(state),
                           "--data-dir", str(tmp_path / "data"), "--reports-dir", str(tmp_path / "reports"),
                           "--name", "mnist"], cwd=REPO, capture_output=True, text=True, timeout=600)
    (path,) = (state / "results").glob("*.json")
    result = json.loads(path.read_text())
    assert proc.returncode == 0 and result["status"] == "ok", result.get("failure")
    assert result["spec"]["data"]["dataset"] == "learnable-mnist" and result["spec"]["data"]["sha256"]
    assert "the generated MNIST stand-in (2000 training, 500 test images) in MNIST's file format, not MNIST" in \
        result["probe"]["shims"]
    assert result["model"]["layers"][0] == "Conv2d" and result["effective"]["train_steps_per_epoch"] == [3]

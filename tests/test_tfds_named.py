"""``tfds.load`` of MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 on the run's data, in TFDS's own prepared format.

- On the host: the plan reads ``tfds.load('mnist', ...)`` and ``tfds.builder(...)`` in a script's code.
- In the TensorFlow environment, one process: CIFAR-10's verified data written by the kit is the dataset
  TFDS's own builder makes from the binary archive (same ids, images, labels, order, label names); then each
  of the four stand-ins read back by TFDS itself with sliced splits, as_supervised, with_info, batch_size=-1.
- The corpus's TFDS tutorial script, end to end through the CLI on the quick profile (slow).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from checkout import REPO
from test_corpus import row

from reprokit.environments import datasets
from reprokit.plan import script_datasets
from reprokit.results import results

CORPUS = REPO / "tests" / "corpus" / "tfds_scripts"
SHAPES = {"mnist": [28, 28, 1], "fashion_mnist": [28, 28, 1], "cifar10": [32, 32, 3], "cifar100": [32, 32, 3]}
CLASSES = {"mnist": 10, "fashion_mnist": 10, "cifar10": 10, "cifar100": 100}
VERSIONS = {"mnist": "3.0.1", "fashion_mnist": "3.0.1", "cifar10": "3.0.2", "cifar100": "3.0.2"}


def test_the_plan_reads_the_datasets_tfds_loads(tmp_path):
    (tmp_path / "train.py").write_text(
        "import tensorflow_datasets as tfds\n"
        "name = 'cifar10'\n"                                          # a string is not a load
        "ds = tfds.load('fashion_mnist:3.*.*', split='train[:90%]')\n"
        "other = tfds.load(name)\n"                                   # not a literal: not read
        "builder = tensorflow_datasets.builder('cifar100')\n"
        "svhn = tfds.load('svhn_cropped')\n")                         # not one the kit serves
    assert script_datasets.loaded(tmp_path, "train.py") == ["fashion_mnist", "cifar100"]
    assert script_datasets.planned(["mnist"], "quick") == "learnable-mnist"


def test_tfds_reads_each_named_dataset_as_tfds_prepares_it(kit_python, posted_data, tmp_path):
    stand_in = datasets.prepare({"dataset": "learnable-mnist", "train_samples": 300, "test_samples": 100,
                                 "seed": 0}, tmp_path)
    stand_in_spec = {"dataset": "learnable-mnist", "file": stand_in.file, "sha256": stand_in.sha256,
                     "train_samples": 300, "test_samples": 100, "tfds": None}
    cifar10 = datasets.prepare({"dataset": "cifar10", "train_samples": None, "test_samples": None, "seed": 0},
                               posted_data, allow_download=False)
    posted_spec = {"dataset": "cifar10", "file": cifar10.file, "sha256": cifar10.sha256, "train_samples": None,
                   "test_samples": None, "tfds": None}
    proc = subprocess.run([str(kit_python("tensorflow")), str(REPO / "tests" / "tfds_named_driver.py"),
                           str(tmp_path), json.dumps(stand_in_spec), str(posted_data), json.dumps(posted_spec)],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # the verified data, written by the kit: TFDS's own cifar10, element for element, in TFDS's order
    assert out["same_as_tfds"] == {"train": True, "test": True, "names": True}
    for name, seen in out["loaded"].items():
        assert seen["splits"] == {"train": 300, "test": 100} and seen["train"] == 270 and seen["test"] == 100, name
        assert seen["image"] == [SHAPES[name], "uint8"] and seen["label"] == "int64", name
        assert seen["classes"] == seen["seen_classes"] == CLASSES[name] and seen["version"] == VERSIONS[name], name
        assert seen["batched"]["image"] == [100, *SHAPES[name]] and seen["batched"]["label"] == [100], name
        assert seen["data_dir"].endswith(f".reprokit-data/tfds/{name}/{VERSIONS[name]}"), name
        title = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}
        assert (f"the generated {title[name]} stand-in (300 training, 100 test images) as TFDS's prepared {name} "
                f"{VERSIONS[name]}, written in the run by TFDS's own builder, not {title[name]}") in out["shims"]
    assert out["loaded"]["cifar100"]["coarse"] == 20 and out["loaded"]["cifar10"]["builder"] == 100
    assert out["tried"] == []


def _run_script(framework: str, script, tmp_path) -> dict:
    """The script through the CLI, alone, on the quick profile with the local backend: its one result, ok."""
    state = tmp_path / "state"
    proc = subprocess.run(
        [sys.executable, "-m", "reprokit", "reproduce", "--script", f"{framework}={script}", "--frameworks",
         framework, "--backend", "local", "--profile", "quick", "--state-dir", str(state), "--data-dir",
         str(tmp_path / "data"), "--reports-dir", str(tmp_path / "reports"), "--name", f"tfds-{framework}"],
        cwd=REPO, capture_output=True, text=True, timeout=900, env=os.environ)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = (state / "results").glob("*.json")
    r = json.loads(path.read_text())
    assert r["status"] == "ok" and results.problems(r) is None, r.get("failure")
    return r


@pytest.mark.slow
def test_the_tfds_tutorial_script_trains_on_the_stand_in_tfds_prepares(kit_python, tmp_path):
    kit_python("tensorflow")
    r = _run_script("tensorflow", CORPUS / "mnist_tfds_keras.py", tmp_path)
    print("\n" + row(r, "not run (one script)"))
    # the plan read tfds.load('mnist'): the host made MNIST's stand-in, and TFDS read it as its prepared mnist
    assert r["spec"]["data"]["dataset"] == "learnable-mnist"
    n_train, n_test = r["spec"]["data"]["train_samples"], r["spec"]["data"]["test_samples"]
    assert (f"the generated MNIST stand-in ({n_train} training, {n_test} test images) as TFDS's prepared mnist 3.0.1, "
            f"written in the run by TFDS's own builder, not MNIST") in r["probe"]["shims"]
    e = r["effective"]
    assert e["input"] == "Keras fit over the script's own tf.data dataset" and e["train_steps_per_epoch"] == [3]
    assert e["batch_size"]["min"] == e["batch_size"]["max"] == 128 and e["test_samples"] >= 300
    assert r["probe"]["ended"] == "the script ran to its end, bounded (evaluation, fit)"


@pytest.mark.slow
def test_the_flax_tfds_tutorial_trains_in_the_jax_environment(kit_python, tmp_path):
    """The Flax MNIST tutorial's shape: tfds.load into tf.data, its requirements.txt bringing TensorFlow and
    TFDS into the JAX run, resolved against the JAX lock (TFDS's dependency promise publishes only its source:
    built into a pure-Python wheel once)."""
    kit_python("jax")
    r = _run_script("jax", CORPUS / "flax" / "mnist_tfds_nnx.py", tmp_path)
    print("\n" + row(r, "not run (one script)"))
    install = r["spec"]["script"]["requirements"]["install"]
    assert any(line.startswith("promise==") for line in install), install
    assert any(line.startswith("tensorflow-cpu==") for line in install), install
    assert r["spec"]["data"]["dataset"] == "learnable-mnist"
    n_train, n_test = r["spec"]["data"]["train_samples"], r["spec"]["data"]["test_samples"]
    assert (f"the generated MNIST stand-in ({n_train} training, {n_test} test images) as TFDS's prepared mnist 3.0.1, "
            f"written in the run by TFDS's own builder, not MNIST") in r["probe"]["shims"]
    e = r["effective"]
    # the script's own batches of 32 from tf.data, bounded by the probe's step count (no loader of its own)
    assert e["batch_size"]["min"] == e["batch_size"]["max"] == 32 and sum(e["train_steps_per_epoch"]) == 3
    assert r["model"]["parameters"]["total"] == 3 * 3 * 32 + 32 + 3 * 3 * 32 * 64 + 64 + 3136 * 256 + 256 + 2570

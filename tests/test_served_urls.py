"""The named datasets served by library wherever the library is, and their published files by URL.

- In each framework's real environment, one process under the probe's data layer (reprokit/kits/served_data) fetches every
  listed URL (reprokit/kits/contract/published_urls.py) with each client it has: urllib everywhere, requests and
  keras.utils.get_file (with the published file_hash) in TensorFlow's. Each file reads back in its published
  format; a URL in the mirrors' folders the list lacks is refused in its sentence, one elsewhere meets the network
  guard; a script's own md5 of the stand-in is the published one, other bytes hash as ever; a file written outside
  the run's folders is put back.
- A standard run whose staged published files are not the published ones: refused, naming the file.
- On the host: the plan reads the URLs a script fetches.
- The corpus's scripts that fetch by URL and load MNIST through torchvision in JAX, end to end through the CLI on
  the quick profile (slow).
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from checkout import REPO
from test_corpus import row
from test_named_data import loopback, stand_in_data  # noqa: F401 (fixtures)
from test_tfds_named import _run_script

from reprokit import cli
from reprokit.environments import datasets
from reprokit.kits.contract.published_urls import URLS, in_listed_folder, not_listed, published
from reprokit.kits.framework_free.dataset_formats import write_cifar_tarball
from reprokit.kits.training_loop.network_guard import NO_NETWORK
from reprokit.plan import script_datasets

CORPUS = REPO / "tests" / "corpus" / "served_data"
UNLISTED = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
ELSEWHERE = "https://example.com/mnist.npz"
MNIST_IMAGES = "https://storage.googleapis.com/cvdf-datasets/mnist/train-images-idx3-ubyte.gz"
CLIENTS = {"pytorch": ["urlopen", "urlretrieve"], "jax": ["urlopen", "urlretrieve"],
           "tensorflow": ["urlopen", "urlretrieve", "requests", "get_file"]}
HASHES = ("hashlib's md5 and sha256 of a file the run wrote for a listed URL give the published file's digests, so a "
          "script's own check of them (get_file's file_hash, an md5 of the bytes) passes on it; other bytes hash as "
          "ever, and staged published files are checked against their published checksums")


def expected(url: str, n_train: int = 300, n_test: int = 100) -> dict:
    """What the stand-in's file of a URL holds, read in the file's published format."""
    name = url.rsplit("/", 1)[1]
    if name == "mnist.npz":
        return {f"{x}_{split}": [[n, 28, 28][: 3 if x == "x" else 1], "uint8"]
                for split, n in (("test", n_test), ("train", n_train)) for x in ("x", "y")}
    if name.startswith("cifar-10-"):
        return {"members": [f"cifar-10-batches-py/{f}" for f in ("batches.meta", *(f"data_batch_{i}" for i in
                                                                                    range(1, 6)), "test_batch")],
                "rows": [n_train // 5, 3072]}
    if name.startswith("cifar-100-"):
        return {"members": ["cifar-100-python/meta", "cifar-100-python/test", "cifar-100-python/train"],
                "rows": [n_train, 3072]}
    n = n_train if name.startswith("train") else n_test
    return {"idx": [n, 28, 28] if "images" in name else [n]}


def _drive(kit_python, framework: str, data_dir: Path, spec_data: dict, tmp_path: Path) -> dict:
    """The driver in the framework's environment, its temporary folder its own (so OUTSIDE is outside the run)."""
    outside = tmp_path / "elsewhere" / "train-images-idx3-ubyte.gz"
    outside.parent.mkdir()
    outside.write_bytes(b"a file the script's folder had before")
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path / "tmp"), "KERAS_HOME": str(tmp_path / "k")}
    proc = subprocess.run([str(kit_python(framework)), str(REPO / "tests" / "served_urls_driver.py"), str(data_dir),
                           json.dumps(spec_data), str(outside)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "jax"])
def test_each_client_reads_the_published_files_by_url_and_refuses_the_rest(kit_python, stand_in_data,  # noqa: F811
                                                                           tmp_path, framework):
    out = _drive(kit_python, framework, *stand_in_data, tmp_path)
    assert sorted(out["read"]) == sorted(CLIENTS[framework])
    for client in CLIENTS[framework]:
        assert out["read"][client] == {url: expected(url) for url in URLS}, client
        assert out["refused"][client][UNLISTED] == not_listed(UNLISTED), client
        if client != "get_file":     # Keras's own download names the file it cannot fetch (tests/test_named_data.py)
            assert NO_NETWORK in out["refused"][client][ELSEWHERE], client
    assert out["tried"] == ["example.com:443"] * (len(CLIENTS[framework]) - CLIENTS[framework].count("get_file"))
    checks = out["checks"]
    # a script's own checks of the published digests pass on the stand-in's bytes, whose real md5 is another
    assert checks["own_md5"] == URLS[MNIST_IMAGES].md5 != checks["real_md5"]
    assert checks["own_sha256"] == URLS[MNIST_IMAGES].sha256
    assert checks["other_md5"][0] == checks["other_md5"][1]               # other bytes: hashlib's own digest
    assert checks["outside_served"] and checks["outside_back"]
    assert HASHES in out["shims"] and any(s.startswith("the published files the script fetches into ")
                                          for s in out["shims"])
    for title in ("MNIST", "Fashion-MNIST", "CIFAR-10", "CIFAR-100"):
        assert f"the generated {title} stand-in (300 training, 100 test images) in {title}'s file format, not " \
               f"{title}" in out["shims"]
    if framework == "tensorflow":
        assert checks["streamed"] and checks["md5_get_file"] == {"idx": [300]}    # an md5 file_hash passes too
        assert checks["extracted"] == ["batches.meta", *(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]
        assert checks["keras_cache"].endswith("/work/.reprokit-data/keras")     # not ~/.keras: no stand-in left there
        assert checks["wrong_hash"].startswith("Incomplete or corrupted file detected.")


def test_a_staged_published_file_that_fails_its_checksum_is_refused_naming_it(loopback, kit_python,  # noqa: F811
                                                                               tmp_path):
    """A standard run: the host staged small files in MNIST's and CIFAR-100's formats where the published ones go
    (the loopback server's, whose md5s the host was given); in the run they are held to the published checksums."""
    data_dir = tmp_path / "data"
    assert cli.main(["data", "--data-dir", str(data_dir), "MNIST", "cifar-100"]) == 0
    prepared = datasets.prepared({"dataset": "mnist", "train_samples": None, "test_samples": None}, data_dir)
    spec_data = {"dataset": "mnist", "file": prepared.file, "sha256": prepared.sha256, "train_samples": 30,
                 "test_samples": 10, "tfds": None}
    out = _drive(kit_python, "tensorflow", data_dir, spec_data, tmp_path)
    for client in CLIENTS["tensorflow"]:
        refused = out["refused"][client]
        for url, file in URLS.items():
            staged = data_dir / ("cifar-100-python.tar.gz" if file.dataset == "cifar100" else f"MNIST/raw/{file.name}")
            if file.dataset in ("mnist", "cifar100") and file.name != "mnist.npz":
                assert refused[url].startswith(f"{staged} is not the published {file.name} of "), (client, url)
                assert refused[url].endswith(f"the published one {file.md5}): delete it and stage "
                                             f"{'MNIST' if file.dataset == 'mnist' else 'CIFAR-100'} again with "
                                             f"`nox -s data -- {file.dataset}`"), (client, url)
        # Keras's mnist.npz, which the host does not keep: written by the run from the verified arrays, its
        # published sha256 passing get_file's check (declared)
        assert out["read"][client]["https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"] == \
            expected("https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz", 30, 10), client
    assert "MNIST (30 training, 10 test images) from the verified arrays, written as MNIST's published mnist.npz" in \
        out["shims"] and HASHES in out["shims"]


def test_the_plan_reads_the_published_files_a_script_fetches(tmp_path):
    (tmp_path / "fetch.py").write_text(
        '"""Like https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz, in prose."""\n'
        "import urllib.request\n"
        "base_url = 'https://storage.googleapis.com/cvdf-datasets/mnist/'\n"      # a folder, joined to each name
        "keras_base = 'https://storage.googleapis.com/tensorflow/tf-keras-datasets/'\n"   # two datasets' folder
        "urllib.request.urlretrieve(f'https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz', 'c.tgz')\n")
    assert script_datasets.loaded(tmp_path, "fetch.py") == ["mnist", "cifar10"]
    (tmp_path / "keras").mkdir()
    (tmp_path / "keras" / "get.py").write_text(
        "import keras\nbase = 'https://storage.googleapis.com/tensorflow/tf-keras-datasets/'\n"
        "path = keras.utils.get_file('mnist.npz', origin=base + 'mnist.npz')\n")
    assert script_datasets.loaded(tmp_path / "keras", "get.py") == ["mnist"]
    assert script_datasets.planned(["mnist", "cifar10"], "quick") == "learnable-mnist"


def test_the_list_takes_a_url_as_its_mirror_serves_it_and_the_tarball_is_the_same_bytes_each_time(tmp_path):
    lecun = "http://yann.lecun.com/exdb/mnist/train-images-idx3-ubyte.gz"
    assert published(lecun.replace("http://yann.lecun.com", "HTTPS://Yann.LeCun.com")) == URLS[lecun]
    assert published(lecun + "?raw=1") == URLS[lecun] and published("ftp://yann.lecun.com/exdb/mnist/x.gz") is None
    assert in_listed_folder(UNLISTED) and not in_listed_folder(ELSEWHERE) and published(UNLISTED) is None
    batches = tmp_path / "cifar-10-batches-py"
    batches.mkdir()
    (batches / "data_batch_1").write_bytes(b"rows")
    first = write_cifar_tarball(batches, tmp_path / "a.tar.gz").read_bytes()
    os.utime(batches / "data_batch_1", (0, 12345))       # another time and copy: the same bytes
    assert write_cifar_tarball(batches, tmp_path / "b.tar.gz").read_bytes() == first


# --- the corpus, end to end -----------------------------------------------------------------------------------

def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} if folder.is_dir() else {}


@pytest.mark.slow
def test_the_jax_script_that_fetches_mnist_with_urllib_trains_on_the_stand_in(kit_python, tmp_path):
    """JAX's examples' way: urlretrieve of the four idx files from the cvdf mirror into /tmp/jax_example_data,
    parsed with numpy, a jitted update of optax's SGD. A loop without a loader: the probe stops it at its bound,
    before the evaluation after each epoch. The files it wrote there go with it."""
    kit_python("jax")
    shared = Path("/tmp/jax_example_data")
    before = _files(shared)
    r = _run_script("jax", CORPUS / "by_url" / "mnist_urllib_jax.py", tmp_path)
    print("\n" + row(r, "not run (one script)"))
    assert _files(shared) == before
    assert r["spec"]["data"]["dataset"] == "learnable-mnist"       # the plan read the mirror's folder in its code
    n_train, n_test = r["spec"]["data"]["train_samples"], r["spec"]["data"]["test_samples"]
    shims = r["probe"]["shims"]
    assert f"the generated MNIST stand-in ({n_train} training, {n_test} test images) in MNIST's file format, not " \
           f"MNIST" in shims and HASHES in shims
    assert f"the published files the script fetches into {shared}, outside the run's folders, are removed when the " \
           f"script ends (what was there is put back)" in shims
    e = r["effective"]
    assert e["batch_size"]["min"] == e["batch_size"]["max"] == 128 and e["train_steps_per_epoch"] == [3]
    assert r["probe"]["ended"].startswith("the probe stopped the script at its bound (steps)")


@pytest.mark.slow
def test_the_keras_script_that_fetches_cifar10_with_get_file_and_its_hash_trains(kit_python, tmp_path):
    """get_file of CIFAR-10's published tarball with extract=True and its published sha256, as Keras's own
    cifar10.load_data calls it: Keras checks the hash of the stand-in's tarball, extracts it, and the script fits
    and evaluates."""
    kit_python("tensorflow")
    r = _run_script("tensorflow", CORPUS / "by_url" / "cifar10_get_file_keras.py", tmp_path)
    print("\n" + row(r, "not run (one script)"))
    assert r["spec"]["data"]["dataset"] == "learnable"              # CIFAR-10: the profile's own stand-in
    shims = r["probe"]["shims"]
    assert "the generated CIFAR-10 stand-in (2000 training, 500 test images) in CIFAR-10's file format, not " \
           "CIFAR-10" in shims and HASHES in shims
    e = r["effective"]
    assert e["batch_size"]["min"] == e["batch_size"]["max"] == 128 and e["train_steps_per_epoch"] == [3]
    assert e["test_samples"] >= 300 and any(p["phase"] == "eval" and p["steps"] for p in r["memory"]["phases"])
    assert r["probe"]["ended"] == "the script ran to its end, bounded (evaluation, fit)"


@pytest.mark.slow
def test_the_jax_notebook_loads_mnist_through_torchvision(kit_python, tmp_path):
    """Equinox's MNIST tutorial's shape in Flax NNX: torchvision.datasets.MNIST(download=True) and a torch
    DataLoader in the JAX environment, its requirements.txt bringing torch and torchvision (installed as any
    script's requirements are). It evaluates at its first step, which ends the bounded epoch of a loop without a
    loader of the probe's own."""
    kit_python("jax")
    r = _run_script("jax", CORPUS / "torchvision_jax" / "mnist_torchvision_jax.ipynb", tmp_path)
    print("\n" + row(r, "not run (one script)"))
    install = r["spec"]["script"]["requirements"]["install"]
    assert {line.split("==")[0] for line in install} >= {"torch", "torchvision"}, install
    assert r["spec"]["data"]["dataset"] == "learnable-mnist"       # the plan read torchvision's MNIST
    n_train, n_test = r["spec"]["data"]["train_samples"], r["spec"]["data"]["test_samples"]
    shims = r["probe"]["shims"]
    assert f"the generated MNIST stand-in ({n_train} training, {n_test} test images) in MNIST's file format, not " \
           f"MNIST" in shims
    assert any(s.startswith("torchvision.datasets' MNIST, FashionMNIST, CIFAR10, CIFAR100 read the run's files")
               for s in shims)
    e = r["effective"]
    assert e["batch_size"]["min"] == e["batch_size"]["max"] == 64 and e["test_samples"] == n_test
    assert any(p["phase"] == "eval" and p["steps"] for p in r["memory"]["phases"])

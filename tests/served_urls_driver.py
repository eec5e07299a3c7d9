"""Fetches the named datasets' published files by URL with each client the environment has, under the probe's data
layer, as a script would.

    PYTHONPATH=REPO KIT_PYTHON tests/served_urls_driver.py DATA_DIR SPEC_DATA_JSON OUTSIDE

Run by tests/test_served_urls.py in each framework's real environment: the network guard and the common data
layer (reprokit/kits/served_data) installed as the probe installs them, then every listed URL fetched with urllib's urlopen
and urlretrieve, requests where it is importable and keras.utils.get_file (with the published file_hash) where
Keras is; a URL in the mirrors' folders that the list lacks, and one elsewhere, tried with each; one file written
outside the run's folders (OUTSIDE, where a file already is) and put back. Prints one JSON line: what each client
read, in the file's own format, the refusals, the checks, the shims and the addresses tried. A standard run whose
staged files are not the published ones gets the refusal instead of the bytes.
"""
from __future__ import annotations

import _hashlib
import gzip
import hashlib
import io
import json
import os
import pickle
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from reprokit.kits import served_data
from reprokit.kits.contract.published_urls import URLS
from reprokit.kits.contract.spec import ScriptData
from reprokit.kits.training_loop.network_guard import block_network
from reprokit.kits.training_loop.staged_data import NotProvided, StagedData

data_dir, spec_data, outside = Path(sys.argv[1]), json.loads(sys.argv[2]), Path(sys.argv[3])
tried: list[str] = []
shims = [block_network(tried)]
work = Path(tempfile.mkdtemp()) / "work"
(work / "sub").mkdir(parents=True)
os.chdir(work / "sub")
named = StagedData(ScriptData(**spec_data), data_dir, work, shims)
shims += served_data.install(named, None)
out: dict = {"read": {}, "refused": {}, "checks": {}}
UNLISTED = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"     # TFDS's binary version: not on the list
ELSEWHERE = "https://example.com/mnist.npz"
MNIST_IMAGES = "https://storage.googleapis.com/cvdf-datasets/mnist/train-images-idx3-ubyte.gz"    # JAX's examples'


def shape_of(name: str, data: bytes) -> dict:
    """What the bytes hold, read in the file's published format."""
    if name.endswith(".tar.gz"):
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = sorted(m.name for m in tar.getmembers() if m.isfile())
            first = tar.extractfile(next(m for m in members if m.endswith(("data_batch_1", "/train"))))
            batch = pickle.load(first, encoding="bytes")
        return {"members": members, "rows": list(np.asarray(batch[b"data"]).shape)}
    if name.endswith(".npz"):
        with np.load(io.BytesIO(data)) as npz:
            return {k: [list(npz[k].shape), str(npz[k].dtype)] for k in sorted(npz.files)}
    raw = gzip.decompress(data)
    dims = raw[3]
    return {"idx": [int(n) for n in np.frombuffer(raw[4:4 + 4 * dims], ">u4")]}


def attempt(kind: str, url: str, fetch) -> None:
    """Records what a client read of a URL, or the sentence that refused it."""
    try:
        out["read"].setdefault(kind, {})[url] = fetch(url)
    except NotProvided as exc:
        out["refused"].setdefault(kind, {})[url] = str(exc)
    except (urllib.error.URLError, OSError) as exc:
        out["refused"].setdefault(kind, {})[url] = f"{type(exc).__name__}: {exc}"


def urlopen(url: str) -> dict:
    with urllib.request.urlopen(url) as response:
        assert response.status == 200 and int(response.headers["Content-Length"]) > 0
        return shape_of(url, response.read())


def urlretrieve(url: str) -> dict:
    path, _ = urllib.request.urlretrieve(url, os.path.basename(url))
    return shape_of(url, Path(path).read_bytes())


for url in [*URLS, UNLISTED, ELSEWHERE]:
    attempt("urlopen", url, urlopen)
    attempt("urlretrieve", url, urlretrieve)
if named.stand_in:
    # a script's own md5 of what it fetched (the stand-in's bytes, whose real md5 is another), and of other bytes
    fetched = Path(urllib.request.urlretrieve(MNIST_IMAGES, "mnist-images.gz")[0]).read_bytes()
    out["checks"]["own_md5"] = hashlib.md5(fetched).hexdigest()
    out["checks"]["own_sha256"] = hashlib.new("sha256", fetched).hexdigest()
    out["checks"]["real_md5"] = _hashlib.openssl_md5(fetched).hexdigest()
    out["checks"]["other_md5"] = [hashlib.md5(fetched + b"\0").hexdigest(),
                                  _hashlib.openssl_md5(fetched + b"\0").hexdigest()]
    # a file written outside the run's folders goes with the script, and what was there comes back
    before = outside.read_bytes()
    urllib.request.urlretrieve(next(iter(URLS)), str(outside))
    out["checks"]["outside_served"] = outside.read_bytes() != before
    named.put_back()
    out["checks"]["outside_back"] = outside.read_bytes() == before

try:
    import requests
except ImportError:
    requests = None
if requests is not None:
    for url in [*URLS, UNLISTED, ELSEWHERE]:
        attempt("requests", url, lambda u: shape_of(u, requests.get(u, timeout=5).content))
if requests is not None and named.stand_in:
    streamed = requests.Session().get(MNIST_IMAGES, stream=True)
    out["checks"]["streamed"] = b"".join(streamed.iter_content(4096)) == fetched

try:
    import keras
except ImportError:
    keras = None
if keras is not None:
    for url in URLS:          # each with its published file_hash, as Keras's datasets give theirs
        attempt("get_file", url, lambda u: shape_of(u, Path(keras.utils.get_file(
            origin=u, file_hash=URLS[u].sha256 or URLS[u].md5)).read_bytes()))
    attempt("get_file", UNLISTED, lambda u: keras.utils.get_file(origin=u))
if keras is not None and named.stand_in:
    labels = "https://storage.googleapis.com/cvdf-datasets/mnist/train-labels-idx1-ubyte.gz"
    out["checks"]["md5_get_file"] = shape_of(labels, Path(keras.utils.get_file(
        "labels.gz", origin=labels, file_hash=URLS[labels].md5)).read_bytes())
    cifar10 = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    extracted = Path(keras.utils.get_file("cifar-10-batches-py-target", origin=cifar10, extract=True,
                                          file_hash=URLS[cifar10].sha256))      # as Keras's cifar10.load_data
    out["checks"]["extracted"] = sorted(p.name for p in (extracted / "cifar-10-batches-py").iterdir())
    out["checks"]["keras_cache"] = str(extracted.parent.parent)
    try:        # a file_hash that is not the published one fails, as it would on the published file
        keras.utils.get_file("other.npz", file_hash="0" * 64,
                             origin="https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz")
    except ValueError as exc:
        out["checks"]["wrong_hash"] = str(exc)

print(json.dumps({**out, "shims": shims, "tried": tried}))

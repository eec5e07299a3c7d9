"""Dataset preparation (host) and reading (kit), on real files in the official formats."""
from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from checkout import REPO

from reprokit.environments import datasets
from reprokit.errors import UserError
from reprokit.kits.framework_free import data as kitdata

PER_BATCH = 20  # images in each of the small archive's six batches
# A pixel planted in data_batch_2, image 3: green channel, row 5, column 7.
PLANTED = {"batch": "data_batch_2", "image": 3, "channel": 1, "row": 5, "col": 7, "value": 251}


def _batch(index: int) -> dict:
    """One pickled batch as the official archive holds it: (n, 3072) CHW rows and labels."""
    data = np.full((PER_BATCH, 3072), index, dtype=np.uint8)
    labels = [(index + i) % 10 for i in range(PER_BATCH)]
    return {b"batch_label": f"batch {index}".encode(), b"data": data, b"labels": labels}


def write_small_cifar10(directory: Path, *, with_test_batch: bool = True) -> Path:
    """A cifar-10-python.tar.gz in the official layout, with PER_BATCH images per batch."""
    batches = {f"data_batch_{i}": _batch(i) for i in range(1, 6)}
    if with_test_batch:
        batches["test_batch"] = _batch(6)
    p = PLANTED
    batches[p["batch"]][b"data"][p["image"], p["channel"] * 1024 + p["row"] * 32 + p["col"]] = p["value"]
    batches["batches.meta"] = {b"label_names": [f"class{i}".encode() for i in range(10)]}
    path = directory / datasets.CIFAR10_ARCHIVE
    with tarfile.open(path, "w:gz") as tar:
        for name, content in batches.items():
            payload = pickle.dumps(content)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return path


@pytest.fixture
def small_cifar10(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache dir holding the small archive, accepted as the official one."""
    archive = write_small_cifar10(tmp_path)
    monkeypatch.setattr(datasets, "CIFAR10_MD5", hashlib.md5(archive.read_bytes()).hexdigest())
    return tmp_path


def _cifar10(train: int | None = None, test: int | None = None) -> dict:
    return {"dataset": "cifar10", "train_samples": train, "test_samples": test, "seed": 0}


def _learnable(train: int, test: int, seed: int = 0) -> dict:
    return {"dataset": "learnable", "train_samples": train, "test_samples": test, "seed": seed}


# --- CIFAR-10 conversion ----------------------------------------------------------

def test_cifar10_converts_to_nhwc_with_labels_and_counts(small_cifar10: Path) -> None:
    prepared = datasets.prepare(_cifar10(), small_cifar10, allow_download=False)
    assert (prepared.file, prepared.train_samples, prepared.test_samples) == ("cifar10.npz", 100, 20)
    path = small_cifar10 / prepared.file
    assert prepared.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    with np.load(path) as npz:
        x_train, y_train, x_test, y_test = (npz[k] for k in ("x_train", "y_train", "x_test", "y_test"))
    assert x_train.shape == (100, 32, 32, 3) and x_train.dtype == np.uint8
    assert x_test.shape == (20, 32, 32, 3) and y_train.dtype == y_test.dtype == np.int64
    p = PLANTED
    image = x_train[PER_BATCH * 1 + p["image"]]  # data_batch_2 follows data_batch_1
    assert image[p["row"], p["col"], p["channel"]] == p["value"]
    assert np.count_nonzero(image != 2) == 1  # every other value is the batch's fill
    assert (x_train[:PER_BATCH] == 1).all() and (x_test == 6).all()
    assert y_train[:3].tolist() == [1, 2, 3] and y_test[:3].tolist() == [6, 7, 8]


def test_cifar10_counts_are_the_ones_the_kit_will_use(small_cifar10: Path) -> None:
    prepared = datasets.prepare(_cifar10(train=30, test=1000), small_cifar10, allow_download=False)
    assert (prepared.train_samples, prepared.test_samples) == (30, 20)
    arrays = kitdata.load(small_cifar10 / prepared.file, prepared.sha256,
                          prepared.train_samples, prepared.test_samples)
    assert (len(arrays.x_train), len(arrays.y_train), len(arrays.x_test)) == (30, 30, 20)


def test_cifar10_wrong_md5_is_refused(tmp_path: Path) -> None:
    archive = write_small_cifar10(tmp_path)  # the official md5 stays expected
    with pytest.raises(UserError) as refused:
        datasets.prepare(_cifar10(), tmp_path, allow_download=False)
    message = str(refused.value)
    assert str(archive) in message and datasets.CIFAR10_MD5 in message
    assert hashlib.md5(archive.read_bytes()).hexdigest() in message
    assert not (tmp_path / datasets.CIFAR10_FILE).exists()


def test_cifar10_archive_lacking_a_batch_is_refused_and_leaves_no_file(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    archive = write_small_cifar10(tmp_path, with_test_batch=False)
    monkeypatch.setattr(datasets, "CIFAR10_MD5", hashlib.md5(archive.read_bytes()).hexdigest())
    with pytest.raises(UserError, match="lacks test_batch"):
        datasets.prepare(_cifar10(), tmp_path, allow_download=False)
    assert os.listdir(tmp_path) == [archive.name]


def test_cifar10_missing_archive_without_download_names_where_to_put_it(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="missing") as refused:
        datasets.prepare(_cifar10(), tmp_path, allow_download=False)
    assert str(tmp_path / datasets.CIFAR10_ARCHIVE) in str(refused.value)
    assert os.listdir(tmp_path) == []


def test_prepared_file_is_reused_and_no_temp_file_is_left(small_cifar10: Path) -> None:
    first = datasets.prepare(_cifar10(), small_cifar10, allow_download=False)
    path = small_cifar10 / first.file
    mtime = path.stat().st_mtime_ns
    (small_cifar10 / datasets.CIFAR10_ARCHIVE).unlink()  # reuse must not need the archive
    second = datasets.prepare(_cifar10(), small_cifar10, allow_download=False)
    assert second == first and path.stat().st_mtime_ns == mtime
    assert sorted(os.listdir(small_cifar10)) == ["cifar10.npz", "cifar10.npz.sha256"]


def test_stale_checksum_sidecar_is_recomputed(tmp_path: Path) -> None:
    first = datasets.prepare(_learnable(20, 10), tmp_path)
    path = tmp_path / first.file
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["y_test"][0] = (arrays["y_test"][0] + 1) % 10
    np.savez(path, **arrays)
    sidecar = path.with_name(path.name + ".sha256")
    os.utime(sidecar, ns=(path.stat().st_mtime_ns - 10**9,) * 2)
    second = datasets.prepare(_learnable(20, 10), tmp_path)
    assert second.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() != first.sha256


def test_unknown_dataset_lists_the_allowed_names(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cifar10, synthetic, learnable"):
        datasets.prepare({"dataset": "svhn", "train_samples": None, "test_samples": None, "seed": 0},
                         tmp_path)


# --- generated datasets -----------------------------------------------------------

def test_synthetic_is_seeded_noise_in_the_common_layout(tmp_path: Path) -> None:
    spec = {"dataset": "synthetic", "train_samples": 50, "test_samples": 10, "seed": 3}
    prepared = datasets.prepare(spec, tmp_path)
    assert prepared.file == "synthetic-n50-t10-s3.npz"
    again = datasets.prepare(spec, tmp_path / "elsewhere")
    assert again.sha256 == prepared.sha256
    arrays = kitdata.load(tmp_path / prepared.file, prepared.sha256, None, None)
    assert arrays.x_train.shape == (50, 32, 32, 3) and arrays.x_test.shape == (10, 32, 32, 3)
    assert arrays.x_train.dtype == np.uint8 and arrays.y_train.dtype == np.int64
    assert set(arrays.y_train.tolist()) <= set(range(10))


def test_synthetic_takes_the_shape_a_spec_feeds_as_it_is(tmp_path: Path) -> None:
    """ResNet-50's ImageNet shape: at the input size where the spec does not resize, with its classes; a spec that
    resizes (VGG16's CIFAR-10 at 224) gets CIFAR-10's 32x32, as before."""
    spec = {"dataset": "synthetic", "train_samples": 40, "test_samples": 8, "seed": 3, "input_size": 64,
            "resize": "none", "num_classes": 1000}
    prepared = datasets.prepare(spec, tmp_path)
    assert prepared.file == "synthetic-r64-c1000-n40-t8-s3.npz"
    arrays = kitdata.load(tmp_path / prepared.file, prepared.sha256, None, None)
    assert arrays.x_train.shape == (40, 64, 64, 3) and arrays.x_test.shape == (8, 64, 64, 3)
    assert max(arrays.y_train.tolist()) >= 10 and set(arrays.y_train.tolist()) <= set(range(1000))
    resized = datasets.prepare({**spec, "resize": "bilinear", "num_classes": 10}, tmp_path)
    assert resized.file == "synthetic-n40-t8-s3.npz"


def test_learnable_is_deterministic_in_its_seed_and_balanced(tmp_path: Path) -> None:
    a = datasets.prepare(_learnable(200, 50, seed=1), tmp_path / "a")
    b = datasets.prepare(_learnable(200, 50, seed=1), tmp_path / "b")
    c = datasets.prepare(_learnable(200, 50, seed=2), tmp_path / "c")
    assert a.file == "learnable-n200-t50-s1.npz" and a.sha256 == b.sha256 != c.sha256
    arrays = kitdata.load(tmp_path / "a" / a.file, a.sha256, None, None)
    assert np.bincount(arrays.y_train, minlength=10).tolist() == [20] * 10
    assert np.bincount(arrays.y_test, minlength=10).tolist() == [5] * 10


def test_learnable_default_sizes(tmp_path: Path) -> None:
    prepared = datasets.prepare({"dataset": "learnable", "train_samples": None,
                                 "test_samples": None, "seed": 0}, tmp_path)
    assert (prepared.file, prepared.train_samples, prepared.test_samples) == \
        ("learnable-n2000-t500-s0.npz", 2000, 500)


def _spectrum(x: np.ndarray) -> np.ndarray:
    """Phase-invariant features: the normalised amplitude spectrum of the grey image."""
    grey = x.astype(np.float32).mean(axis=-1)
    amplitude = np.abs(np.fft.rfft2(grey - grey.mean(axis=(1, 2), keepdims=True))).reshape(len(x), -1)
    return amplitude / np.linalg.norm(amplitude, axis=1, keepdims=True)


def test_learnable_carries_signal_a_simple_classifier_finds(tmp_path: Path) -> None:
    prepared = datasets.prepare(_learnable(1000, 300), tmp_path)
    arrays = kitdata.load(tmp_path / prepared.file, prepared.sha256, None, None)
    train, test = _spectrum(arrays.x_train), _spectrum(arrays.x_test)
    means = np.stack([train[arrays.y_train == c].mean(axis=0) for c in range(10)])
    nearest = ((test[:, None, :] - means[None]) ** 2).sum(axis=-1).argmin(axis=1)
    assert (nearest == arrays.y_test).mean() > 0.5


# --- kit side ---------------------------------------------------------------------

def test_kit_load_refuses_a_tampered_or_missing_file(tmp_path: Path) -> None:
    prepared = datasets.prepare(_learnable(20, 10), tmp_path)
    path = tmp_path / prepared.file
    with open(path, "r+b") as fh:
        fh.seek(-1, os.SEEK_END)
        last = fh.read(1)
        fh.seek(-1, os.SEEK_END)
        fh.write(bytes([last[0] ^ 0xFF]))
    with pytest.raises(kitdata.DataError, match=prepared.sha256):
        kitdata.load(path, prepared.sha256, None, None)
    with pytest.raises(kitdata.DataError, match="missing"):
        kitdata.load(tmp_path / "absent.npz", prepared.sha256, None, None)


def test_kit_load_refuses_more_samples_than_the_file_holds(tmp_path: Path) -> None:
    prepared = datasets.prepare(_learnable(20, 10), tmp_path)
    with pytest.raises(kitdata.DataError, match="holds 20"):
        kitdata.load(tmp_path / prepared.file, prepared.sha256, 21, None)


def test_epoch_order_is_deterministic_and_changes_per_epoch() -> None:
    first = kitdata.epoch_order(100, seed=7, epoch=0, shuffle=True)
    assert np.array_equal(first, kitdata.epoch_order(100, seed=7, epoch=0, shuffle=True))
    assert sorted(first.tolist()) == list(range(100))
    assert not np.array_equal(first, kitdata.epoch_order(100, seed=7, epoch=1, shuffle=True))
    assert not np.array_equal(first, kitdata.epoch_order(100, seed=8, epoch=0, shuffle=True))
    assert kitdata.epoch_order(5, seed=7, epoch=3, shuffle=False).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(("drop_last", "sizes"), [(False, [4, 4, 2]), (True, [4, 4])])
def test_batches_cover_the_order_and_drop_last_drops_the_short_one(drop_last: bool,
                                                                    sizes: list[int]) -> None:
    order = np.arange(10)[::-1]
    got = list(kitdata.batches(order, 4, drop_last))
    assert [len(b) for b in got] == sizes
    assert np.concatenate(got).tolist() == order[:sum(sizes)].tolist()


# --- the as-posted readers' own formats -------------------------------------------

@pytest.fixture
def posted_cifar10(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict]:
    """A data dir with the small python archive accepted as official, converted to the kit's .npz."""
    import cifar10_files
    batches = cifar10_files.images(per_batch=6)
    archive = cifar10_files.write_python_archive(tmp_path, batches)
    monkeypatch.setattr(datasets, "CIFAR10_MD5", cifar10_files.md5(archive))
    datasets.prepare(_cifar10(), tmp_path, allow_download=False)
    return tmp_path, batches


def test_cifar10_batches_are_extracted_whole_for_torchvision(posted_cifar10) -> None:
    data_dir, batches = posted_cifar10
    folder = datasets.cifar10_batches(data_dir, allow_download=False)
    assert folder == data_dir / kitdata.CIFAR10_BATCHES
    assert sorted(p.name for p in folder.iterdir()) == sorted([*batches, "batches.meta"])
    with open(folder / "data_batch_3", "rb") as fh:
        rows = pickle.load(fh, encoding="bytes")[b"data"]
    assert np.array_equal(rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), batches["data_batch_3"][0])
    assert not list(data_dir.glob(".*partial*"))


def test_tfds_is_not_prepared_until_the_data_step_ran(tmp_path: Path) -> None:
    assert datasets.tfds_prepared(tmp_path) is None


def test_a_prepared_folder_that_changed_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "prepared"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.bin").write_bytes(b"abc")
    digest = kitdata.tree_sha256(folder)
    assert kitdata.verified_folder(folder, digest) == folder
    (folder / "sub" / "a.bin").rename(folder / "sub" / "b.bin")       # same bytes, another name
    with pytest.raises(kitdata.DataError, match=digest):
        kitdata.verified_folder(folder, digest)
    with pytest.raises(kitdata.DataError, match="missing"):
        kitdata.verified_folder(tmp_path / "absent", digest)


_READ_TFDS = """
import json, sys
from pathlib import Path
from reprokit.kits.tensorflow_kit import tfds_data
named = json.loads(sys.argv[2])
train, test = tfds_data.load(Path(sys.argv[1]), named["dir"], named["sha256"], 25, 4)
print(json.dumps({split: [[ex["id"].numpy().decode(), int(ex["label"]), ex["image"].numpy().tolist()] for ex in ds]
                  for split, ds in (("train", train), ("test", test))}))
"""


@pytest.mark.slow
def test_tfds_built_by_its_own_builder_holds_the_archive_images(posted_data, kit_python) -> None:
    """The data step ran TFDS's cifar10 builder on the binary archive; the kit's tfds.load reads it back,
    after checking the folder's sha256, and every example is the .npz's image of the same index."""
    named = datasets.tfds_prepared(posted_data)
    assert named == {"dir": kitdata.TFDS_CIFAR10, "sha256": kitdata.tree_sha256(posted_data / kitdata.TFDS_CIFAR10)}
    assert (posted_data / named["dir"] / "dataset_info.json").exists()
    proc = subprocess.run([str(kit_python("tensorflow")), "-c", _READ_TFDS, str(posted_data), json.dumps(named)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    read = json.loads(proc.stdout.strip().splitlines()[-1])
    with np.load(posted_data / datasets.CIFAR10_FILE) as npz:
        arrays = {k: npz[k] for k in npz.files}
    assert (len(read["train"]), len(read["test"])) == (25, 4)       # cut to the counts asked for
    for split, rows in read.items():
        for example_id, label, image in rows:
            index = int(example_id.split("_")[1])                  # TFDS shuffles; its ids keep the archive's order
            assert example_id.startswith(split)
            assert label == arrays[f"y_{split}"][index]
            assert np.array_equal(np.asarray(image, dtype=np.uint8), arrays[f"x_{split}"][index])


_READ_TORCHVISION = """
import hashlib, json, sys
from pathlib import Path
import torch
from torchvision.datasets import CIFAR10
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.pytorch_kit.posted_input import CpuResizeLoader

data_dir, md5s = Path(sys.argv[1]), json.loads(sys.argv[2])
npz = data_dir / "cifar10.npz"
arrays = datalib.load(npz, hashlib.sha256(npz.read_bytes()).hexdigest(), 40, 10)
from types import SimpleNamespace as Fields                 # the RunSpec fields the reader reads
data = Fields(dataset="cifar10", input_size=48, shuffle=True, drop_last=True)
spec = Fields(data=data, train=Fields(seed=0, batch_size=8, eval_batch_size=8))
try:
    CpuResizeLoader(arrays, spec, lambda x, y: (x, y))
    refused = None
except RuntimeError as exc:               # torchvision checks every file against the official md5s
    refused = str(exc)
CIFAR10.train_list = [[n, md5s[n]] for n in ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4",
                                               "data_batch_5"]]
CIFAR10.test_list = [["test_batch", md5s["test_batch"]]]
CIFAR10.meta = {**CIFAR10.meta, "md5": md5s["batches.meta"]}
posted = CpuResizeLoader(arrays, spec, lambda x, y: (x, y))
arrays_only = CpuResizeLoader(arrays, Fields(data=Fields(**{**vars(data), "dataset": "learnable"}), train=spec.train),
                              lambda x, y: (x, y))
same = all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
           for split in ("train", "test")
           for a, b in zip(*(getattr(l, split)(*([1] if split == "train" else [])) for l in (posted, arrays_only))))
batches = [len(y) for _, y in posted.train(1)]
print(json.dumps({"refused": refused, "same": same, "batches": batches, "test": sum(len(y) for _, y in posted.test()),
                  "shape": list(next(posted.train(2))[0].shape)}))
"""


@pytest.mark.slow
def test_torchvision_reads_the_verified_archive_as_posted(posted_data, kit_python) -> None:
    """The posted reader, torchvision.datasets.CIFAR10 with Resize and ToTensor, over the extracted batches
    (download=False): the same tensors as the posted transforms on the kit's arrays, in the kit's order and
    counts. torchvision checks the files' md5s itself: the small archive's are not the official ones."""
    import cifar10_files
    folder = posted_data / kitdata.CIFAR10_BATCHES
    md5s = {p.name: cifar10_files.md5(p) for p in folder.iterdir()}
    proc = subprocess.run([str(kit_python("pytorch")), "-c", _READ_TORCHVISION, str(posted_data), json.dumps(md5s)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    read = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "corrupted" in read["refused"]
    assert read["same"] is True
    assert read["batches"] == [8] * 5 and read["test"] == 10 and read["shape"] == [8, 3, 48, 48]


def test_the_tfds_data_step_runs_through_the_runner_and_refuses_a_wrong_archive(kit_python, tmp_path: Path):
    """`reprokit data`'s TFDS step is a kit process like any other: TFDS's own builder checks the archive
    against the checksum it registers, and a wrong one ends in one sentence, with nothing left in the cache."""
    from reprokit.execute import data_step
    from reprokit.runners.make import make
    cache = tmp_path / "data"
    cache.mkdir()
    (cache / "cifar-10-binary.tar.gz").write_bytes(b"not the official archive")
    runner = make("local", data_dir=cache, device="cpu", python=kit_python("tensorflow"))
    with pytest.raises(UserError, match=r"preparing TFDS's cifar10 in .* failed \(.+\); reach the network, or "
                                        r"place the official cifar-10-binary.tar.gz"):
        data_step.tfds(cache, runner, tmp_path / "work")
    assert datasets.tfds_prepared(cache) is None and not (cache / kitdata.TFDS_ROOT).exists()


def test_a_cut_short_cifar10_file_without_its_archive_is_set_aside_and_refused_in_one_sentence(
        small_cifar10: Path) -> None:
    path = small_cifar10 / datasets.prepare(_cifar10(), small_cifar10, allow_download=False).file
    (small_cifar10 / datasets.CIFAR10_ARCHIVE).unlink()
    path.write_bytes(path.read_bytes()[:1000])
    assert datasets.prepared(_cifar10(), small_cifar10) is None
    assert [p.name.split(".")[:2] for p in (small_cifar10 / "quarantine").iterdir()] == [["cifar10", "npz"]]
    path.write_bytes(b"")                                          # cut short again, now at nothing
    with pytest.raises(UserError, match="The CIFAR-10 archive is missing"):
        datasets.prepare(_cifar10(), small_cifar10, allow_download=False)
    assert not path.exists() and len(list((small_cifar10 / "quarantine").iterdir())) == 2


def test_a_damaged_checksum_sidecar_is_set_aside_and_computed_again(tmp_path: Path, capsys) -> None:
    first = datasets.prepare(_learnable(20, 10), tmp_path)
    sidecar = tmp_path / f"{first.file}.sha256"
    sidecar.write_text(sidecar.read_text()[:30])
    assert datasets.prepare(_learnable(20, 10), tmp_path) == first
    assert f"checksum {sidecar.name} was damaged (not one sha256sum line for its file)" in capsys.readouterr().err
    assert sidecar.read_text() == f"{first.sha256}  {first.file}\n"

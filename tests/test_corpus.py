"""The corpus (tests/corpus/): scripts written as the frameworks' tutorials and examples write them, run end to
end through the CLI, unmodified, on the quick profile.

Each pair runs as a user runs it: `reprokit reproduce --script pytorch=... --script tensorflow=...`, its
packages from the requirements.txt beside the scripts (resolved against the locks), its dataset by name,
its plots kept. For every script the run must get past its first step, keep the batch the script asks
for (the bounds never change it), reach the script's own evaluation after its bounded training, and say
what its certificate found. The state folder is deep on purpose: a DataLoader's workers bind Unix
sockets under TMPDIR, whose paths hold 107 bytes. One Keras script also runs in the pinned TensorFlow image.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import REPO

from reprokit.results import results

CORPUS = REPO / "tests" / "corpus"
# Each script's own batch, as its text sets it (Keras's fit batches arrays by 32 where the script says nothing).
BATCH = {"train_classifier.py": 4, "cnn_keras.py": 32, "main.py": 64, "beginner_keras.py": 32,
         "quickstart_torch.py": 64, "classification_keras.py": 32}
PAIRS = {"cifar10_tutorials": ("train_classifier.py", "cnn_keras.py"),
         "mnist_examples": ("main.py --epochs 2 --save-model", "beginner_keras.py"),
         "fashion_quickstarts": ("quickstart_torch.py", "classification_keras.py")}
pytestmark = pytest.mark.slow


def _reproduce(tmp_path: Path, folder: str, *extra: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    state = tmp_path / ("a-state-folder-as-deep-as-a-users-project-tree-often-is" * 2) / "state"
    torch_script, keras_script = PAIRS[folder]
    proc = subprocess.run(
        [sys.executable, "-m", "reprokit", "reproduce", "--script", f"pytorch={CORPUS / folder / torch_script}",
         "--script", f"tensorflow={CORPUS / folder / keras_script}", "--backend", "local", "--profile", "quick",
         "--state-dir", str(state), "--data-dir", str(tmp_path / "data"), "--reports-dir", str(tmp_path / "reports"),
         "--name", folder, *extra], cwd=REPO, capture_output=True, text=True, timeout=900, env=os.environ)
    found = [json.loads(p.read_text()) for p in sorted((state / "results").glob("*.json"))]
    return proc, found


def row(r: dict, certificate: str) -> str:
    """One line of the corpus table: script; past step 1; batch unchanged; evaluation seen; certificate; wall."""
    e = r["effective"]
    name = Path(r["spec"]["script"]["path"]).name
    evaluated = [p for p in r["memory"]["phases"] if p["phase"] == "eval" and p["steps"]]
    return (f"| {name} | {sum(e['train_steps_per_epoch'])} steps | {e['batch_size']['configured']} "
            f"(min {e['batch_size']['min']}, max {e['batch_size']['max']}) | {e['test_samples']} samples in "
            f"{len(evaluated)} pass(es) | {certificate} | {r['timing']['wall_s']:.1f} s |")


def assert_as_written(r: dict) -> None:
    """A script's run: ok, past its first step, the batch its text asks for, its own evaluation reached."""
    name = Path(r["spec"]["script"]["path"]).name
    assert r["status"] == "ok" and results.problems(r) is None, (name, r.get("failure"))
    e = r["effective"]
    assert sum(e["train_steps_per_epoch"]) > 1, name
    assert len(e["train_steps_per_epoch"]) == 1 and all(e["train_steps_per_epoch"]), (name, e)   # quick: 1 epoch
    assert e["batch_size"]["min"] == e["batch_size"]["max"] == BATCH[name], (name, e["batch_size"])
    assert e["test_samples"] >= 300, (name, e["test_samples"])     # counted in samples, whatever the batch
    assert any(p["phase"] == "eval" and p["steps"] for p in r["memory"]["phases"]), name
    assert "the script ran to its end" in r["probe"]["ended"], (name, r["probe"]["ended"])


def test_the_cifar10_tutorials_run_plot_and_are_certified_as_different_models(kit_python, tmp_path):
    kit_python("pytorch"), kit_python("tensorflow")
    proc, found = _reproduce(tmp_path, "cifar10_tutorials")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for r in found:
        assert_as_written(r)
    # Net (2 conv, 3 dense, SGD) against the Keras CNN (3 conv, 2 dense, Adam): the certificate says so
    (cert_path,) = (tmp_path / "reports" / "cifar10_tutorials").glob("certificate-*.json")
    cert = json.loads(cert_path.read_text())
    assert cert["status"] == "fail" and "the layer lists differ" in json.dumps(cert)
    figures = {f["name"] for r in found for f in r["probe"]["figures"]}
    assert figures == {"samples.png", "history.png"}
    print("\n".join(row(r, cert["status"]) for r in found))


@pytest.mark.parametrize("folder", ["mnist_examples", "fashion_quickstarts"])
def test_the_mnist_and_fashion_examples_load_their_datasets_by_name_and_train(kit_python, tmp_path, folder):
    kit_python("pytorch"), kit_python("tensorflow")
    proc, found = _reproduce(tmp_path, folder, "--no-certify")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {r["spec"]["framework"] for r in found} == {"pytorch", "tensorflow"}
    for r in found:
        assert_as_written(r)
        dataset = "MNIST" if folder == "mnist_examples" else "Fashion-MNIST"
        assert any(f"the generated {dataset} stand-in" in s for s in r["probe"]["shims"]), r["probe"]["shims"]
    print("\n".join(row(r, "not run (--no-certify)") for r in found))

"""Trainers under the probe: a Keras model with its own train_step, and a PyTorch Lightning Trainer, observed as
plain loops are (steps, the batch in the tensors, phases, the captured model) and bounded without changing a step.

The corpus trainers (tests/corpus/trainers/) run together through the CLI as a user runs them, on the quick
profile, with the certificate of the two models they train. Each trainer's bound script (tests/bound_scripts/)
writes down every step's batch size, its samples in their order and its loss; it runs under the probe twice,
at once with the corpus run: unbounded, and bounded to 3 training steps per epoch and evaluation passes of 3
batches and at least 300 samples. Each bounded pass must be the unbounded pass's first steps: the same
batches in the same order, and where the weights are still the same (the first epoch's training) the same
losses.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from checkout import REPO
from test_corpus import row

from reprokit import cli
from reprokit.environments import requirement_sets
from reprokit.execute import compose
from reprokit.results import results

CORPUS = REPO / "tests" / "corpus" / "trainers"
SCRIPTS = REPO / "tests" / "bound_scripts"
BOUNDED = {"max_steps": 3, "epochs": None, "eval_steps": 3}       # --profile full --max-steps 3
pytestmark = pytest.mark.slow


def _bound_runs(tmp: Path, data_dir: Path, python: Path, framework: str, script: str,
                *require: str) -> dict[tuple[str, str], tuple[Path, subprocess.Popen]]:
    """The bound script under the probe, unbounded and bounded (its requirements installed first, once, as the CLI
    installs them, and given to the probe as the runners give them)."""
    extra = [a for r in require for a in ("--require", f"{framework}={r}")]
    parsed = cli.parse(["--script", f"{framework}={SCRIPTS / script}", "--frameworks", framework, "--backend",
                        "local", "--profile", "quick", "--data-dir", str(data_dir), "--state-dir",
                        str(tmp / "state"), *extra])
    (planned,) = compose.build(parsed).specs
    planned_spec = planned.to_dict()
    requirement_sets.install_all([planned_spec])
    installed = requirement_sets.for_spec(planned_spec)
    started = {}
    for name, bounds in (("unbounded", dict.fromkeys(BOUNDED)), ("bounded", BOUNDED)):
        folder = tmp / name
        folder.mkdir(parents=True)
        spec = planned_spec | {"bounds": bounds}
        spec["data"] = spec["data"] | {"train_samples": 400}        # and the stand-in's 500 test images
        spec["script"] = spec["script"] | {"args": [str(folder / "records.json")]}
        (folder / "spec.json").write_text(json.dumps(spec))
        started[framework, name] = folder, subprocess.Popen(
            [str(python), "-m", "reprokit.kits.probe", "--spec", str(folder / "spec.json"), "--out",
             str(folder / "out" / "result.json"), "--data-dir", str(data_dir), "--script-dir", str(SCRIPTS),
             *(("--requirements", str(installed)) if installed else ())],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})     # the same sums in both
    return started


@pytest.fixture(scope="module")
def runs(kit_python, tmp_path_factory, data_dir) -> dict:
    """All at once: each bound script unbounded and bounded, and the corpus pair through the CLI, as a user runs
    it, with its certificate. By key: (framework, "unbounded" / "bounded") -> (records, result); (framework,
    "corpus") -> the corpus script's result; "certificate" -> the certificate."""
    tmp = tmp_path_factory.mktemp("trainers")
    started = {**_bound_runs(tmp / "keras", data_dir, kit_python("tensorflow"), "tensorflow", "keras_train_step.py"),
               **_bound_runs(tmp / "lightning", data_dir, kit_python("pytorch"), "pytorch", "lightning_module.py",
                             "lightning")}
    state = tmp / "corpus" / "state"
    corpus = subprocess.Popen(
        [sys.executable, "-m", "reprokit", "reproduce", "--script", f"pytorch={CORPUS / 'lightning_mnist.py'}",
         "--script", f"tensorflow={CORPUS / 'train_step_keras.py'}", "--require", "pytorch=lightning", "--backend",
         "local", "--profile", "quick", "--state-dir", str(state), "--data-dir", str(data_dir), "--reports-dir",
         str(tmp / "reports"), "--name", "trainers"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    done: dict = {}
    for key, (folder, proc) in started.items():
        _, err = proc.communicate(timeout=600)
        result = json.loads((folder / "out" / "result.json").read_text())
        assert proc.returncode == 0 and result["status"] == "ok", (key, result.get("failure"), err[-3000:])
        done[key] = json.loads((folder / "records.json").read_text()), result
    out, _ = corpus.communicate(timeout=600)
    assert corpus.returncode == 0, out[-3000:]
    for path in (state / "results").glob("*.json"):
        result = json.loads(path.read_text())
        assert results.problems(result) is None and result["status"] == "ok", result.get("failure")
        done[result["spec"]["framework"], "corpus"] = result
    (cert,) = (tmp / "reports" / "trainers").glob("certificate-*.json")
    done["certificate"] = json.loads(cert.read_text())
    for framework in ("pytorch", "tensorflow"):       # the corpus table's rows, for -s
        print("\n" + row(done[framework, "corpus"], done["certificate"]["status"]))
    return done


def _passes(records: list) -> dict[tuple[str, int], list[list]]:
    """The records by (what, epoch): one pass each; a step's [batch size, its samples in order (a fingerprint, or
    labels and first pixel), loss]."""
    out: dict[tuple[str, int], list[list]] = defaultdict(list)
    for what, epoch, *step in records:
        out[what, epoch].append(step)
    return out


def _first_steps(bounded: list, unbounded: list, evaluation: bool, losses: bool) -> None:
    """The bounded pass is the unbounded pass's first steps: sizes and samples in order, and the losses too."""
    if evaluation:        # max(3 batches, 300 samples)
        assert sum(s[0] for s in bounded[:-1]) < 300 <= sum(s[0] for s in bounded)
    else:
        assert len(bounded) == 3
    assert len(unbounded) > len(bounded)
    assert [s[:-1] for s in bounded] == [s[:-1] for s in unbounded[:len(bounded)]]
    if losses:
        assert [s[-1] for s in bounded] == pytest.approx([s[-1] for s in unbounded[:len(bounded)]], rel=1e-6)


def _observed(r: dict) -> tuple:
    e = r["effective"]
    return (e["train_steps_per_epoch"], e["batch_size"]["min"], e["batch_size"]["max"],
            [(p["epoch"], p["phase"], p["steps"]) for p in r["memory"]["phases"]], r["probe"]["models"])


# -- Keras: a model with its own train_step -------------------------------------------------------------------


def test_a_keras_train_step_of_its_own_is_observed_as_fit(runs):
    r = runs["tensorflow", "corpus"]
    # fit on a dataset of batch 64, 3 steps; its validation_data (Keras's batch of 32) until 300 samples; then
    # evaluate with batch 128, 3 batches: the epoch's evaluation; the optimizer's apply is each step
    steps, low, high, phases, models = _observed(r)
    assert (steps, low, high) == ([3], 64, 64)
    assert phases == [(1, "warmup", 1), (1, "train", 2), (1, "eval", 10), (1, "train", 0), (1, "eval", 3)]
    assert models == ["CustomModel with 173,930 parameters"]
    assert r["model"]["layers"] == ["InputLayer", "Conv2D", "MaxPooling2D", "Flatten", "Dense", "Dense"]
    assert r["effective"]["test_samples"] == 384 and r["effective"]["eval_batch_sizes"] == [32, 128]
    assert r["metrics"]["epochs"][0]["train_loss"] > 0             # the probe's own count of the compiled loss
    assert r["probe"]["ended"] == "the script ran to its end, bounded (evaluation, fit)"


def test_a_keras_train_step_bounded_runs_the_unbounded_runs_first_steps(runs):
    (free, whole), (cut, bounded) = runs["tensorflow", "unbounded"], runs["tensorflow", "bounded"]
    full, part = _passes(free), _passes(cut)
    assert part.keys() == full.keys() == {("fit", 0), ("fit", 1), ("validation", 0), ("validation", 1),
                                          ("evaluate", 0)}
    for (what, epoch), steps in part.items():
        _first_steps(steps, full[what, epoch], what != "fit", losses=(what, epoch) == ("fit", 0))
    assert part["fit", 1][0][1] != part["fit", 0][0][1]        # the shuffled dataset's next order, as unbounded
    # each epoch with its validation; the evaluate after fit is the last epoch's, in its place (Keras's arrays are
    # no loader the probe tells apart), and the probe's own count of the loss is the steps' own
    assert [(p["epoch"], p["phase"], p["steps"]) for p in bounded["memory"]["phases"]] == [
        (1, "warmup", 1), (1, "train", 2), (1, "eval", 10), (2, "train", 3), (2, "eval", 10), (2, "train", 0),
        (2, "eval", 19)]
    assert bounded["effective"]["train_steps_per_epoch"] == [3, 3]
    assert whole["effective"]["train_steps_per_epoch"] == [13, 13]
    assert bounded["effective"]["batch_size"]["max"] == whole["effective"]["batch_size"]["max"] == 32
    for epoch, last in enumerate((part["validation", 0], part["evaluate", 0])):
        assert bounded["metrics"]["epochs"][epoch]["test_loss"] == pytest.approx(
            sum(s[0] * s[-1] for s in last) / sum(s[0] for s in last), rel=1e-5)
    assert bounded["probe"]["bounded"] == ["evaluation", "fit"]


# -- Lightning: a LightningModule and a Trainer ---------------------------------------------------------------


def test_a_lightning_trainer_is_observed_and_bounded_through_its_own_arguments(runs):
    r = runs["pytorch", "corpus"]
    # max_epochs 3 -> 1 and 3 training batches (limit_train_batches), batch 64 seen in the tensors; its validation
    # (4 batches: 200 of the stand-in's 2,000) and its test of the best checkpoint (5 batches, 320 samples: the
    # loader's pass ended) are the epoch's evaluation; Lightning's sanity check before the first step is not
    steps, low, high, phases, models = _observed(r)
    assert (steps, low, high) == ([3], 64, 64)
    assert phases == [(1, "warmup", 1), (1, "train", 2), (1, "eval", 9)]
    assert models == ["LitMNIST with 55,050 parameters"]
    assert r["effective"]["test_samples"] == 200 + 320 and r["effective"]["input"].startswith("the script's own "
                                                                                             "DataLoader")
    assert r["metrics"]["epochs"][0]["train_loss"] > 0 and r["metrics"]["epochs"][0]["test_accuracy"] is not None
    assert r["probe"]["bounded"] == ["epochs", "evaluation", "loader"]
    assert r["probe"]["ended"] == "the script ran to its end, bounded (epochs, evaluation, loader)"
    (note,) = r["probe"]["notes"]
    assert "limit_train_batches=3 (the script's: the default), max_epochs=1 (the script's: 3)" in note
    assert any("from hash-checked wheels, installed once on this machine" in s and "lightning==" in s
               for s in r["probe"]["shims"])


def test_a_lightning_trainer_bounded_runs_the_unbounded_runs_first_steps(runs):
    (free, whole), (cut, bounded) = runs["pytorch", "unbounded"], runs["pytorch", "bounded"]
    full, part = _passes(free), _passes(cut)
    assert part.keys() == full.keys() == {("sanity", 0), ("fit", 0), ("fit", 1), ("validation", 0),
                                          ("validation", 1), ("test", 2)}
    assert part["sanity", 0] == full["sanity", 0]         # Lightning's 2 batches, before any step
    for (what, epoch), steps in part.items():
        if what != "sanity":
            _first_steps(steps, full[what, epoch], what != "fit", losses=(what, epoch) == ("fit", 0))
    assert part["fit", 1][0][1] != part["fit", 0][0][1]        # the shuffled loader's next order, as unbounded
    # the probe's epochs are Lightning's, each with its validation; the test after fit is the last epoch's too, beside
    # it (another loader), and the probe's own count of their loss is the steps' own
    assert [(p["epoch"], p["phase"], p["steps"]) for p in bounded["memory"]["phases"]] == [
        (1, "warmup", 1), (1, "train", 2), (1, "eval", 15), (2, "train", 3), (2, "eval", 21)]
    assert bounded["effective"]["train_steps_per_epoch"] == [3, 3]
    assert whole["effective"]["train_steps_per_epoch"] == [13, 13]
    last = part["validation", 1] + part["test", 2]
    assert bounded["metrics"]["epochs"][1]["test_loss"] == pytest.approx(
        sum(s[0] * s[-1] for s in last) / sum(s[0] for s in last), rel=1e-5)
    assert bounded["probe"]["bounded"] == ["evaluation", "loader"]


def test_the_certificate_compares_the_models_the_trainers_train(runs):
    """Each side captured the model its trainer steps, before its first update: the LightningModule and the Keras
    model with its own train_step, told apart (3 dense layers against a conv and 2 dense)."""
    cert = runs["certificate"]
    assert cert["captured"] == {"pytorch": ["LitMNIST with 55,050 parameters"],
                                "tensorflow": ["CustomModel with 173,930 parameters"]}
    assert cert["status"] == "fail" and "the layer lists differ (PyTorch: 3 dense; TensorFlow: 1 conv, 2 dense)" \
        in cert["summary"]
    # LitMNIST's forward ends in F.log_softmax into F.nll_loss, as Lightning's MNIST example writes it: what its
    # loss takes, so the outputs check names neither side
    outputs = next(c for c in cert["checks"] if c["name"] == "outputs")
    assert "LitMNIST" not in outputs["evidence"], outputs

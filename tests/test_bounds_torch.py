"""The PyTorch probe's bounds change nothing a step computes (reprokit/kits/observation/bounds.py, reprokit/kits/observation/observe.py).

Three scripts in tests/bound_scripts/ take their batches each its own way: a loop over shuffled DataLoaders
with 2 workers (then a checkpoint, a NEW model loaded from it and tested under inference_mode, and an
accuracy per class), a hand-driven next() over a DataLoader with a batch sampler of its own, and an index
loop that slices tensors. Each writes down every batch it takes: kind, epoch, size, labels in order, first
pixel, loss. Each runs under the probe twice, at once: unbounded, and bounded to 3 training steps per epoch,
2 epochs and evaluation passes of 3 batches and at least 300 samples. Each bounded pass must be the
unbounded pass's first batches, in the same order; where the weights are still the same (the first epoch's
training; an index loop's steps) the same losses. Then the CIFAR-10 tutorial from tests/corpus, through the
CLI as a user runs it: its test of the reloaded model after training is the run's evaluation.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import REPO

from reprokit import cli
from reprokit.execute import compose
from reprokit.report import sections
from reprokit.results import results

SCRIPTS = Path(__file__).parent / "bound_scripts"
TUTORIAL = Path(__file__).parent / "corpus" / "cifar10_tutorials" / "train_classifier.py"
BOUNDED = {"max_steps": 3, "epochs": 2, "eval_steps": 3}         # --profile quick --epochs 2
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(kit_python, tmp_path_factory, data_dir) -> dict[tuple[str, str], tuple[list[dict], dict]]:
    """Each script under the probe, unbounded and bounded, all at once: (its records, the probe's result)."""
    python, tmp = kit_python("pytorch"), tmp_path_factory.mktemp("torch_bounds")
    started = {}
    for script in ("loader_loop", "custom_loop", "index_loop"):
        parsed = cli.parse(["--script", f"pytorch={SCRIPTS / script}.py", "--frameworks", "pytorch", "--backend",
                            "local", "--profile", "quick", "--data-dir", str(data_dir), "--state-dir",
                            str(tmp / "state")])
        (planned,) = compose.build(parsed).specs
        for name, bounds in (("unbounded", dict.fromkeys(BOUNDED)), ("bounded", BOUNDED)):
            folder = tmp / script / name
            folder.mkdir(parents=True)
            (folder / "spec.json").write_text(json.dumps(planned.to_dict() | {"bounds": bounds}))
            started[script, name] = folder, subprocess.Popen(
                [str(python), "-m", "reprokit.kits.probe", "--spec", str(folder / "spec.json"), "--out",
                 str(folder / "out" / "result.json"), "--data-dir", str(data_dir), "--script-dir", str(SCRIPTS)],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",       # the same sums in both
                     "REPROKIT_BOUND_LOG": str(folder / "records.jsonl")})
    done = {}
    for key, (folder, proc) in started.items():
        _, err = proc.communicate(timeout=300)
        result = json.loads((folder / "out" / "result.json").read_text())
        assert results.problems(result) is None
        assert result["status"] == "ok", (key, result.get("failure"), err[-3000:])
        records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]
        done[key] = records, result
    return done


def _taken(records: list[dict], kind: str, epoch: int) -> list[dict]:
    return [r for r in records if r["kind"] == kind and r["epoch"] == epoch]


def _first_of(bounded: list[dict], unbounded: list[dict], losses: bool) -> None:
    """The bounded pass is the unbounded one's first batches: sizes, samples in order, and the losses too."""
    assert bounded and len(bounded) < len(unbounded)
    for got, want in zip(bounded, unbounded):
        assert (got["batch"], got["labels"], got["first"]) == (want["batch"], want["labels"], want["first"])
        if losses:
            assert got["loss"] == pytest.approx(want["loss"], rel=1e-6)


def _mean_loss(records: list[dict]) -> float:
    return sum(r["loss"] * r["batch"] for r in records) / sum(r["batch"] for r in records)


def test_a_dataloader_loop_goes_on_to_its_test_of_a_reloaded_model(runs):
    (full, whole), (part, bounded) = runs["loader_loop", "unbounded"], runs["loader_loop", "bounded"]
    # training: 3 steps per epoch, the first epoch's with the same losses, the second's the same samples
    _first_of(_taken(part, "train", 1), _taken(full, "train", 1), losses=True)
    _first_of(_taken(part, "train", 2), _taken(full, "train", 2), losses=False)
    assert len(_taken(part, "train", 2)) == 3 and not _taken(part, "train", 3)
    # evaluation passes: max(3 batches, 300 samples) of the sorted test set, batches of 20; the third epoch's
    # evaluation repeats the second's on the same weights and ends at once; the reloaded model's test runs
    for epoch in (1, 2):
        _first_of(_taken(part, "eval", epoch), _taken(full, "eval", epoch), losses=False)
        assert len(_taken(part, "eval", epoch)) == 15
    assert not _taken(part, "eval", 3)
    _first_of(_taken(part, "test", 0), _taken(full, "test", 0), losses=False)
    assert len(_taken(part, "test", 0)) == 15
    # what the probe saw: the last epoch's evaluation is the reloaded model's test, counted by the probe itself
    # from its outputs and the batch's labels (the script takes only the argmax), as the script's own loss is
    assert bounded["effective"]["train_steps_per_epoch"] == [3, 3] and bounded["effective"]["test_samples"] == 300
    assert whole["effective"]["train_steps_per_epoch"] == [20, 20, 20] and whole["effective"]["test_samples"] == 500
    assert bounded["metrics"]["epochs"][1]["test_loss"] == pytest.approx(_mean_loss(_taken(part, "eval", 2)), rel=1e-5)
    assert whole["metrics"]["epochs"][2]["test_loss"] == pytest.approx(_mean_loss(_taken(full, "eval", 3)), rel=1e-5)
    assert [(p["epoch"], p["phase"]) for p in bounded["memory"]["phases"]] == [
        (1, "warmup"), (1, "train"), (1, "eval"), (2, "train"), (2, "eval")]
    # its accuracy per class divides by zero on 300 of the sorted test set's 500: the run keeps its figures and
    # says so, naming the line, the bounds that could have caused it and the way to lift them
    line = 1 + next(i for i, text in enumerate((SCRIPTS / "loader_loop.py").read_text().splitlines())
                    if "/ total[c]" in text)
    error = bounded["probe"]["error_after_training"]
    assert (error["error"], error["file"], error["line"]) == ("ZeroDivisionError", "loader_loop.py", line)
    (note,) = bounded["probe"]["notes"]
    assert f"ZeroDivisionError: division by zero at loader_loop.py line {line}" in note
    assert ("a bound could have caused it: it came after training bounded to 3 step(s) per epoch and 2 epoch(s), "
            "with evaluation passes bounded to max(3 batches, 300 samples)") in note and "--profile full" in note
    assert bounded["probe"]["ended"].startswith("the script raised ZeroDivisionError after training")
    assert "error_after_training" not in whole["probe"] and whole["probe"]["ended"] == "the script ran to its end"
    shown = sections.probed({"script": {"pytorch": [bounded]}})
    assert "**Note:** after training (6 step(s) in 2 epoch(s)) the script raised ZeroDivisionError" in shown


def test_a_hand_driven_loop_over_a_batch_sampler_ends_where_its_next_runs_out(runs):
    (full, whole), (part, bounded) = runs["custom_loop", "unbounded"], runs["custom_loop", "bounded"]
    _first_of(_taken(part, "train", 1), _taken(full, "train", 1), losses=True)
    _first_of(_taken(part, "train", 2), _taken(full, "train", 2), losses=False)
    assert not _taken(part, "train", 3)
    # its test after training: batches of 8 until 300 samples (38 batches), the same samples as unbounded
    _first_of(_taken(part, "test", 0), _taken(full, "test", 0), losses=False)
    assert len(_taken(part, "test", 0)) == 38 and bounded["effective"]["test_samples"] == 304
    assert [r["batch"] for r in _taken(full, "train", 1)] == [32] * 9 + [12]        # its own short last batch
    assert whole["effective"]["train_samples_per_epoch"] == [300, 300, 300]
    assert bounded["probe"]["ended"] == "the script ran to its end, bounded (epochs, evaluation, loader)"
    assert bounded["metrics"]["epochs"][-1]["test_loss"] == pytest.approx(_mean_loss(_taken(part, "test", 0)),
                                                                          rel=1e-5)


def test_an_index_loop_is_stopped_after_n_x_e_steps_the_same_steps(runs):
    (full, whole), (part, bounded) = runs["index_loop", "unbounded"], runs["index_loop", "bounded"]
    # no loader to end: its first 3 x 2 steps, all of them the unbounded run's, losses too; no evaluation
    assert len(part) == 6
    _first_of(part, _taken(full, "train", 1), losses=True)
    assert bounded["probe"]["bounded"] == ["steps"] and "what the script does after training did not run" in \
        bounded["probe"]["ended"]
    # unbounded, all of it: 3 x 14 steps (nothing between its epochs tells one from the next), then its test
    assert whole["effective"]["train_steps_per_epoch"] == [42] and len(_taken(full, "test", 0)) == 10


def test_the_cifar10_tutorial_tests_its_reloaded_model_after_bounded_training(kit_python, tmp_path, data_dir):
    kit_python("pytorch")
    state = tmp_path / "state"
    proc = subprocess.run([sys.executable, "-m", "reprokit", "reproduce", "--script", f"pytorch={TUTORIAL}",
                           "--frameworks", "pytorch", "--backend", "local", "--profile", "quick", "--state-dir",
                           str(state), "--data-dir", str(data_dir), "--reports-dir", str(tmp_path / "reports"),
                           "--name", "tutorial"], cwd=REPO, capture_output=True, text=True, timeout=300)
    (path,) = (state / "results").glob("*.json") or pytest.fail(proc.stdout[-2000:] + proc.stderr[-2000:])
    result = json.loads(path.read_text())
    assert results.problems(result) is None and result["status"] == "ok", result.get("failure")
    # 3 steps of its first epoch; its second epoch's pass ends at once; then it saves, loads a new Net and
    # tests it: one peek batch, then two passes of 75 batches of 4 (300 samples), the last one the run's test
    effective = result["effective"]
    assert effective["train_steps_per_epoch"] == [3] and effective["eval_batch_sizes"] == [4]
    assert effective["test_samples"] == 300
    assert [(p["epoch"], p["phase"], p["steps"]) for p in result["memory"]["phases"]] == [
        (1, "warmup", 1), (1, "train", 2), (1, "eval", 151)]
    assert result["metrics"]["epochs"][0]["test_accuracy"] is not None          # counted by the probe itself
    assert result["probe"]["ended"] == "the script ran to its end, bounded (epochs, evaluation, loader)"
    assert any("max(3 batches, 300 samples)" in s for s in result["probe"]["shims"])

"""The TensorFlow probe's bounds change nothing a step computes (reprokit/kits/tensorflow_kit/bounds.py).

One Keras script (tests/user_scripts/keras_bounds.py) trains a small CNN through every mechanism the probe
bounds (fit on arrays with Keras's default batch and with batch_size, fit on a shuffled tf.data dataset and
on one repeated with its own steps_per_epoch, validation_data, a custom loop over a tf.data dataset, evaluate,
a probability model's predict) and writes down each step's batch size, a fingerprint of its samples in their
order, its training flag and its loss. It runs under the probe twice, at once, in the TensorFlow environment:
unbounded, and bounded as ``--max-steps 3`` bounds a script (3 training steps per epoch; evaluation passes of
3 batches and at least 300 samples). Each bounded pass must be the unbounded pass's first steps: the same
batches in the same order and mode, and, where the weights are still the same (the first epoch's training,
an evaluation before training), the same losses.
"""
from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from checkout import REPO

from reprokit import cli
from reprokit.execute import compose

SCRIPT = Path(__file__).parent / "user_scripts" / "keras_bounds.py"
BOUNDED = {"max_steps": 3, "epochs": None, "eval_steps": 3}       # --profile full --max-steps 3
EVAL_SAMPLES = 300                                                # Bounds.eval_samples of eval_steps 3
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(kit_python, tmp_path_factory, data_dir) -> dict[str, tuple[dict, dict]]:
    """The script under the probe, unbounded and bounded, both at once: (its records, the probe's result)."""
    python, tmp = kit_python("tensorflow"), tmp_path_factory.mktemp("keras_bounds")
    parsed = cli.parse(["--script", f"tensorflow={SCRIPT}", "--frameworks", "tensorflow", "--backend", "local",
                        "--profile", "quick", "--data-dir", str(data_dir), "--state-dir", str(tmp / "state")])
    (planned,) = compose.build(parsed).specs
    started = {}
    for name, bounds in (("unbounded", dict.fromkeys(BOUNDED)), ("bounded", BOUNDED)):
        folder = tmp / name
        folder.mkdir()
        spec = planned.to_dict() | {"bounds": bounds}
        spec["data"].update(train_samples=400)             # and the stand-in's 500 test images
        spec["script"]["args"] = [str(folder / "records.json")]
        (folder / "spec.json").write_text(json.dumps(spec))
        started[name] = (folder, subprocess.Popen(
            [str(python), "-m", "reprokit.kits.probe", "--spec", str(folder / "spec.json"), "--out",
             str(folder / "out" / "result.json"), "--data-dir", str(data_dir), "--script-dir", str(SCRIPT.parent)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)}))
    done = {}
    for name, (folder, proc) in started.items():
        _, err = proc.communicate(timeout=300)
        result = json.loads((folder / "out" / "result.json").read_text())
        assert proc.returncode == 0 and result["status"] == "ok", (result.get("failure"), err[-3000:])
        done[name] = json.loads((folder / "records.json").read_text()), result
    return done


def _passes(records: list) -> dict[tuple[str, int], list[list]]:
    """The records by (what, epoch): one pass each."""
    out: dict[tuple[str, int], list[list]] = defaultdict(list)
    for what, epoch, *step in records:
        out[what, epoch].append(step)
    return out


def test_each_bounded_pass_is_the_unbounded_passs_first_steps(runs):
    (free, _), (bounded, _) = runs["unbounded"], runs["bounded"]
    whole, cut = _passes(free["records"]), _passes(bounded["records"])
    assert cut.keys() == whole.keys() and len(whole) == 19
    for (what, epoch), steps in cut.items():
        unbounded = whole[what, epoch]
        evaluation = any(word in what for word in ("evaluat", "validation", "predict"))
        if evaluation:      # max(3 batches, 300 samples): 75 batches of 4, not 3
            assert sum(s[0] for s in steps[:-1]) < EVAL_SAMPLES <= sum(s[0] for s in steps), (what, epoch)
        elif "steps_per_epoch" in what:
            # Keras reads one iterator across epochs: the 5 batches past the bound are read and not trained on
            # (the script's callback sees them, with the Tap's last batch still in it)
            assert len(steps) == 8 and steps[3:] == [steps[2]] * 5, (what, epoch)
            steps = steps[:3]
        else:
            assert len(steps) == 3, (what, epoch)
        assert len(unbounded) > len(steps), (what, epoch)
        # the same batches (size, samples in their order) in the same mode
        assert [s[:3] for s in steps] == [s[:3] for s in unbounded[:len(steps)]], (what, epoch)
        if epoch == 0 and not evaluation or what == "evaluate before training":
            # the weights are still the unbounded run's: the same losses (fit's: Keras's mean so far)
            assert [s[3] for s in steps] == pytest.approx([s[3] for s in unbounded[:len(steps)]], rel=1e-6)
    # Keras's default batch of 32 for arrays, not 134 (400 samples in 3 steps)
    assert [s[0] for s in cut["fit on arrays", 0]] == [32, 32, 32]
    assert [s[0] for s in cut["evaluate before training", 0]] == [4] * 75
    # the second epoch is the unbounded run's: a shuffled dataset's next pass (the seeds its passes draw are
    # the same), and with the script's own steps_per_epoch, its batches 9 to 11
    assert cut["fit on a dataset", 1][0][1] != cut["fit on a dataset", 0][0][1]
    assert cut["custom loop", 1][0][1] != cut["custom loop", 0][0][1]
    assert whole["fit on a repeated dataset, steps_per_epoch 8", 1][0][1] not in {
        s[1] for s in whole["fit on a repeated dataset, steps_per_epoch 8", 0]}
    assert bounded["predictions"] == 320 and free["predictions"] == 500


def test_evaluate_and_predict_after_fit_are_its_last_epochs_evaluation(runs):
    """As the beginner quickstart ends: fit without validation, evaluate, and predict on a probability model (another
    model object, built on the trained one): both are the last epoch's evaluation, whose training stopped with fit;
    the probe's own count of the loss is Keras's evaluate's, over the same 320 samples (predict computes no loss)."""
    records, result = runs["bounded"]
    phases = [(p["epoch"], p["phase"], p["steps"]) for p in result["memory"]["phases"]]
    assert phases[-3:] == [(9, "train", 3), (10, "train", 3), (10, "eval", 20)], phases
    assert result["effective"]["train_steps_per_epoch"] == [3] * 10
    last = result["metrics"]["counted"][-1]
    assert last["test_steps"] == 20 and last["test_samples"] == 320 and last["train_steps"] == 3
    assert result["metrics"]["epochs"][-1]["test_loss"] == pytest.approx(records["test_loss"], rel=1e-5)
    assert result["probe"]["bounded"] == ["evaluation", "fit", "loader"]
    assert any("pass ends at its bound as Keras ends a pass" in shim for shim in result["probe"]["shims"])

"""The detectors see the user's code, not the kit's switches.

First their rules, on measured series and counts made up here (no process). Then the planted
suite: a user's own experiment (tests/user_pitfalls/: their models and their input pipeline,
evaluation step and metrics hooks) run for real with pitfalls planted in those hooks; each
detector must name its pitfall from what the run showed, and the fixed twin must raise nothing.
The one detector no hook can exercise, eval-mode-in-train, runs on the kit's reproduction of the
post (pt_eval_once) and says it is a declared reproduction.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from checkout import REPO
from conftest import tiny_specs, write_spec

from reprokit.execute import data_step
from reprokit.kits.observation import detectors
from reprokit.plan.experiments import load
from reprokit.plan.plan import Options, specs_for
from reprokit.results.provenance import code

USER_DIR = Path(__file__).parent / "user_pitfalls"


# --- the rules ----------------------------------------------------------------------------------

def test_effective_batch_reports_the_share_of_short_steps():
    assert detectors.effective_batch(32, [32] * 16, 0) == []
    found = detectors.effective_batch(32, [32, 8] * 8, 0)
    assert found[0]["code"] == "effective-batch-size" and found[0]["severity"] == "error"
    assert "8 of 16 training steps (50%) received fewer samples (as few as 8" in found[0]["message"]
    one_short = detectors.effective_batch(32, [32] * 15 + [4], 0)
    assert one_short[0]["severity"] == "warning" and "1 of 16 training steps (6%)" in one_short[0]["message"]
    assert detectors.effective_batch(32, [32] * 15 + [4], 1) == []     # an epoch's last batch, drop_last off


def _series(levels, every=1, start=3):
    return [(start + i * every, int(level)) for i, level in enumerate(levels)]


def test_memory_growth_is_a_steady_trend_above_a_share_of_the_model_not_a_jump():
    base, mib = 700 * 2**20, 2**20
    rng = np.random.default_rng(0)
    steady = _series(base + 5 * mib * np.arange(24))                        # +5 MiB a step, 115 MiB in all
    found = detectors.memory_growth(steady, 2, "process resident memory (VmRSS)", footprint_bytes=4 * mib)
    assert found[0]["code"] == "memory-growth"
    assert found[0]["message"].startswith("process resident memory (VmRSS) rose steadily by 115 MiB")
    jump = _series(np.r_[np.full(12, base), np.full(12, base + 200 * mib)])  # one buffer allocated once
    assert detectors.memory_growth(jump, 2, "s", 4 * mib) == []
    # a jump that straddles two windows, then a slow creep (a validation graph kept into the next epoch)
    staircase = _series(base + mib * np.r_[np.zeros(7), np.linspace(30, 40, 17)] + rng.normal(0, 2 * mib, 24))
    assert detectors.memory_growth(staircase, 2, "s", 4 * mib) == []
    noise = _series(base + rng.normal(0, 8 * mib, 24))
    assert detectors.memory_growth(noise, 2, "s", 4 * mib) == []
    # the same rise, against a model whose own training memory is far larger: not a leak of note
    assert detectors.memory_growth(steady, 2, "s", footprint_bytes=1000 * mib) == []
    assert detectors.memory_growth(steady[:5], 2, "s", 4 * mib) == []      # too few samples for six windows


def test_metrics_are_held_against_the_kits_own_count():
    counted = [{"epoch": 1, "train_correct": 105, "train_samples": 256, "train_steps": 8,
                "test_correct": 20, "test_samples": 64, "test_steps": 2}]
    per_sample = [{"epoch": 1, "train_accuracy": 105 / 256, "test_accuracy": 20 / 64}]
    assert detectors.metric_averaging(per_sample, counted) == []
    per_batch = [{"epoch": 1, "train_accuracy": 105 / 256, "test_accuracy": 20 / 2}]
    found = detectors.metric_averaging(per_batch, counted)
    assert found[0]["code"] == "metrics-not-per-sample"
    assert "epoch 1 test accuracy was reported as 10.0000, but the kit counted 20 correct of 64" in found[0]["message"]
    assert found[0]["message"].endswith("divided by the number of batches (2)")


def test_only_the_detector_no_hook_reaches_is_a_declared_reproduction():
    found = detectors.modes({"train_forwards": 16, "eval_mode_in_train": 16, "eval_forwards": 4,
                             "grad_enabled_in_eval": 4})
    declared = {f["code"]: f.get("declared") for f in found}
    assert declared["grad-in-eval"] is None
    assert "only the kit's reproduction of a post's model.eval()" in declared["eval-mode-in-train"]


# --- the planted suite: the user's own code, run for real -------------------------------------------

def _user_spec(framework: str, plant: list[str], data_dir: Path) -> dict:
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=(framework,),
                   data=data_step.Preparing(data_dir, allow_download=False))
    (planned,) = specs_for(load(USER_DIR / "planted.toml"), opts,
                           lambda fw: {"lock": None, "lock_sha256": None, "image": None}, code([USER_DIR]))
    spec = planned.to_dict()
    spec["model"]["options"]["plant"] = plant
    spec["measure"]["memory_every_steps"] = 1          # every step's memory: the trend has its windows
    return spec


def _run(kit_python, tmp_path: Path, spec: dict, data_dir: Path) -> dict:
    out = tmp_path / f"{spec['framework']}-{'-'.join(spec['model']['options']['plant']) or 'twin'}.json"
    env = {**os.environ, "PYTHONPATH": str(USER_DIR)}      # as the runners put the experiments folder on the path
    proc = subprocess.run([str(kit_python(spec["framework"])), "-m", "reprokit.kits.run", "--spec",
                           str(write_spec(tmp_path, spec)), "--out", str(out), "--data-dir", str(data_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def _by_code(result: dict) -> dict[str, str]:
    return {f["code"]: f["message"] for f in result["findings"]}


PLANTED = [
    ("pytorch", ["softmax", "short-batches", "slow-input", "eval-with-grad"], {
        "probabilities-into-logit-loss": "non-negative and sum to 1",
        "effective-batch-size": "received fewer samples (as few as 8",
        "input-bound": "waiting for the next batch",
        # 3 epochs of 2 evaluation batches, and the warmup's one evaluation step of their one size
        "grad-in-eval": "gradient tracking was on in 7 of 7 forward passes of the model during evaluation",
    }),
    ("pytorch", ["per-batch-metrics", "keep-activations"], {
        "metrics-not-per-sample": "the count was divided by the number of batches (8)",
        "memory-growth": "process resident memory (VmRSS) rose steadily by",
    }),
    ("pytorch", [], {}),
    ("tensorflow", ["short-last-batch"], {
        "shape-after-warmup": "training batch size 16 first at step 8: first met after warmup",
        "effective-batch-size": "3 of 24 training steps (12%) received fewer samples (as few as 16",
    }),
    ("tensorflow", ["batch-of-one", "per-batch-metrics"], {
        "effective-batch-size": "24 of 24 training steps (100%) received fewer samples (as few as 1",
        "metrics-not-per-sample": "the count was divided by the number of batches",
    }),
    ("tensorflow", [], {}),
]


@pytest.mark.slow
@pytest.mark.parametrize("framework,plant,expected", PLANTED,
                         ids=[f"{fw}-{'+'.join(p) or 'fixed twin'}" for fw, p, _ in PLANTED])
def test_each_detector_names_the_pitfall_planted_in_the_users_code(kit_python, tmp_path, data_dir, framework,
                                                                   plant, expected):
    result = _run(kit_python, tmp_path, _user_spec(framework, plant, data_dir), data_dir)
    found = _by_code(result)
    assert set(found) == set(expected), result["findings"]
    for code_, evidence in expected.items():
        assert evidence in found[code_], found[code_]
        assert "declared" not in next(f for f in result["findings"] if f["code"] == code_)
    prefix = {"pytorch": "torch", "tensorflow": "tf"}[framework]
    assert result["effective"]["input"] == f"the user's input hook planted_hooks:{prefix}_input"
    assert result["metrics"]["reported_by"].startswith("the user's metrics hook planted_hooks:")


@pytest.mark.slow
def test_eval_mode_in_training_is_the_kits_reproduction_of_the_post(kit_python, tmp_path, tiny_dir, data_dir):
    spec = tiny_specs(tiny_dir, data_dir)["pytorch"]
    spec["pitfalls"] = ["pt_eval_once"]
    out = tmp_path / "eval-once.json"
    proc = subprocess.run([str(kit_python("pytorch")), "-m", "reprokit.kits.run", "--spec", str(write_spec(tmp_path, spec)),
                           "--out", str(out), "--data-dir", str(data_dir)], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (finding,) = json.loads(out.read_text())["findings"]
    assert finding["code"] == "eval-mode-in-train" and "16 of 16 forward passes during training" in finding["message"]
    assert "only the kit's reproduction" in finding["declared"]


@pytest.mark.parametrize("wait_s,train_s,fires", [(0.02, 0.04, False), (0.2, 0.3, False), (0.3, 0.5, True),
                                                  (0.3, 2.0, False)])
def test_input_bound_needs_a_wait_above_the_schedulers_noise(wait_s, train_s, fires):
    """A wait of milliseconds over millisecond steps (a batch of one on a busy host) is no finding; a wait of
    a quarter second or more that is over 30% of the training time is."""
    from reprokit.kits.training_loop.training import Measurements
    found = detectors.input_bound(Measurements(data_wait_s=wait_s, measured_train_s=train_s))
    assert [f["code"] for f in found] == (["input-bound"] if fires else [])

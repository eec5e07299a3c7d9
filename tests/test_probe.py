"""Users' own scripts, unmodified, under the probe (kits/probe.py): what it sees comes from the frameworks.

The scripts in tests/user_scripts/ are written as people post them, not by the kit: a PyTorch script with
differences planted in it, the same script fixed, and a twin of the fixed one that takes its batch size,
workers and loop style from the environment and keeps its loops in a helper module. Each runs through the
CLI with the local runner, for real, bounded as the quick profile bounds it; their result files are read
back. The twin must give the fixed script's observations: the probe reads the frameworks, not the text.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reprokit import cli, results
from reprokit.provenance import REPO

SCRIPTS = Path(__file__).parent / "user_scripts"
pytestmark = pytest.mark.slow


def _probe(tmp_path: Path, data_dir: Path, script: Path, name: str, env: dict | None = None,
           framework: str = "pytorch") -> tuple[subprocess.CompletedProcess, dict]:
    state = tmp_path / name
    proc = subprocess.run(
        [sys.executable, "-m", "reprokit", "reproduce", "--script", f"{framework}={script}", "--frameworks", framework,
         "--backend", "local", "--profile", "quick", "--state-dir", str(state), "--data-dir", str(data_dir),
         "--reports-dir", str(tmp_path / "reports"), "--name", name],
        cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})
    (path,) = (state / "results").glob("*.json")
    result = json.loads(path.read_text())
    assert results.problems(result) is None
    return proc, result


def _observed(r: dict) -> dict:
    """What the probe saw of a run, the parts that do not depend on timing."""
    return {"input": r["effective"]["input"], "batch": r["effective"]["batch_size"],
            "steps": r["effective"]["train_steps_per_epoch"], "samples": r["effective"]["train_samples_per_epoch"],
            "eval": (r["effective"]["test_samples"], r["effective"]["eval_batch_sizes"]),
            "phases": [(p["epoch"], p["phase"], p["steps"]) for p in r["memory"]["phases"]],
            "findings": sorted(f["code"] for f in r["findings"]),
            "syncs": r["probe"]["host_syncs"]["per_training_step"], "layers": r["model"]["layers"],
            "parameters": r["model"]["parameters"], "bounded": r["probe"]["bounded"]}


def test_the_planted_script_shows_its_differences_and_the_fixed_one_does_not(kit_python, tmp_path, data_dir):
    kit_python("pytorch")
    _, planted = _probe(tmp_path, data_dir, SCRIPTS / "torch_planted.py", "planted")
    _, fixed = _probe(tmp_path, data_dir, SCRIPTS / "torch_fixed.py", "fixed")
    p, f = _observed(planted), _observed(fixed)
    assert p["batch"]["configured"] == p["batch"]["max"] == 16 and f["batch"]["configured"] == 32
    assert "grad-in-eval" in p["findings"] and "grad-in-eval" not in f["findings"]
    grad = next(x for x in planted["findings"] if x["code"] == "grad-in-eval")
    assert "gradient tracking was on in 3 of 3 forward passes of the model during evaluation" in grad["message"]
    assert p["syncs"] == 1.0 and f["syncs"] == 0                  # loss.item() per step, in the script's own file
    assert "Dropout" in p["layers"] and "Dropout" not in f["layers"]
    # quick bounds: 3 training steps, then 3 evaluation batches, and the script stopped at epoch 2's first step
    assert f["steps"] == p["steps"] == [3] and f["eval"] == (96, [32]) and p["eval"] == (48, [16])
    assert f["phases"] == [(1, "warmup", 1), (1, "train", 2), (1, "eval", 3)]
    assert f["bounded"] == ["epochs", "evaluation", "loader"]
    assert fixed["spec"]["source"] == "script" and fixed["probe"]["ended"].startswith("the probe stopped the script")
    assert any("stand-in" in s for s in fixed["probe"]["shims"])
    assert fixed["metrics"]["epochs"][0]["train_loss"] > 0          # the probe's own count of the loss


def test_a_twin_written_otherwise_is_seen_alike(kit_python, tmp_path, data_dir):
    kit_python("pytorch")
    _, fixed = _probe(tmp_path, data_dir, SCRIPTS / "torch_fixed.py", "fixed")
    env = {"REPROKIT_TEST_BATCH": "32", "REPROKIT_TEST_WORKERS": "0", "REPROKIT_TEST_LOOP": "loader"}
    _, twin = _probe(tmp_path, data_dir, SCRIPTS / "torch_twin.py", "twin", env)
    assert _observed(twin) == _observed(fixed)
    # an index loop consumes no loader: the probe stops it after N x E training steps (here before its first
    # evaluation), and says so
    _, index = _probe(tmp_path, data_dir, SCRIPTS / "torch_twin.py", "index", {**env, "REPROKIT_TEST_LOOP": "index"})
    seen = _observed(index)
    assert seen["input"] == "the script's own loop (no DataLoader)" and seen["steps"] == [3]
    assert seen["bounded"] == ["steps"] and seen["phases"] == [(1, "warmup", 1), (1, "train", 2)]
    assert "stopped the script at its bound (steps)" in index["probe"]["ended"]


@pytest.mark.parametrize("script, kind, fragment", [
    ("network.py", "error", "the run has no network: stage the data with `nox -s data` (it tried to reach www.cs.toronto.edu:443)"),
    ("raises.py", "error", "the script raised ValueError: the script's own bug"),
    ("no_training.py", "invalid-output", "no training step observed"),
])
def test_a_script_that_fails_is_a_failed_run_in_one_sentence(kit_python, tmp_path, data_dir, script, kind, fragment):
    kit_python("pytorch")
    proc, result = _probe(tmp_path, data_dir, SCRIPTS / "faults" / script, "fault")
    assert proc.returncode == 1 and result["status"] == "failed"
    assert result["failure"]["kind"] == kind and fragment in result["failure"]["message"], result["failure"]
    if script == "raises.py":
        assert any("the script's own bug" in line for line in result["failure"]["log_tail"])


def test_a_missing_script_is_refused_before_any_run(tmp_path, capsys):
    code = cli.main(["reproduce", "--script", f"pytorch={tmp_path / 'nope.py'}", "--backend", "local",
                     "--state-dir", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error: ") == 1 and "nope.py: no such file" in err
    assert not (tmp_path / "state" / "results").exists()

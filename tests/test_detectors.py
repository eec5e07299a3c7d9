"""Each detector fires on a real short run that has its pitfall and stays silent on the fixed runs.

The detectors never see the pitfall switches: they judge from shapes, modes, memory over steps
and the loss's inputs that the run produced.
"""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import tiny_specs, write_spec

from reprokit.provenance import REPO

pytestmark = pytest.mark.slow


def _findings(kit_python, tmp_path, tiny_dir, data_dir, framework: str, pitfalls: list[str], edit=None) -> list[dict]:
    def change(spec):
        if edit:
            edit(spec)
    spec = tiny_specs(tiny_dir, data_dir, edit=change)[framework]
    spec["pitfalls"] = pitfalls
    out = tmp_path / f"{framework}-{'-'.join(pitfalls) or 'fixed'}.json"
    proc = subprocess.run([str(kit_python(framework)), "-m", "kits.run", "--spec", str(write_spec(tmp_path, spec)),
                           "--out", str(out), "--data-dir", str(data_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())["findings"]


def _codes(findings: list[dict]) -> list[str]:
    return [f["code"] for f in findings]


def _wide_and_long(spec):
    """Full width (a step's graph is tens of MiB) and enough steps for the memory detector's second half."""
    spec["model"]["width_multiplier"] = 1.0
    spec["train"]["epochs"] = 4
    spec["measure"]["memory_every_steps"] = 1


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_fixed_runs_raise_no_alarm(kit_python, tmp_path, tiny_dir, data_dir, framework):
    assert _findings(kit_python, tmp_path, tiny_dir, data_dir, framework, [], _wide_and_long) == []


@pytest.mark.parametrize("framework,pitfall,code,evidence", [
    ("tensorflow", "tf_batch_of_one", "effective-batch-size", "configured batch size 32, but the model received at most 1"),
    ("pytorch", "pt_val_grad", "grad-in-eval", "gradient tracking was on during evaluation"),
    ("pytorch", "pt_eval_once", "eval-mode-in-train", "in evaluation mode during 16 of 16 training steps"),
    ("pytorch", "pt_softmax_before_ce", "probabilities-into-logit-loss", "non-negative and sum to 1"),
    ("pytorch", "pt_metrics_per_batch", "metrics-not-per-sample", "divided by 8 (the number of batches)"),
])
def test_each_pitfall_is_named_by_its_detector(kit_python, tmp_path, tiny_dir, data_dir, framework, pitfall, code,
                                               evidence):
    found = _findings(kit_python, tmp_path, tiny_dir, data_dir, framework, [pitfall])
    assert _codes(found) == [code], found
    assert evidence in found[0]["message"]


def test_a_loss_summed_with_its_graph_shows_as_memory_growth(kit_python, tmp_path, tiny_dir, data_dir):
    found = _findings(kit_python, tmp_path, tiny_dir, data_dir, "pytorch", ["pt_loss_sum_tensor"], _wide_and_long)
    assert _codes(found) == ["memory-growth"], found
    assert "KiB per step" in found[0]["message"]


def test_a_slow_input_source_makes_training_input_bound(kit_python, tmp_path, tiny_dir, data_dir):
    # On this CPU even the seed's per-image resize loader is outrun by the model (about 2% waiting),
    # so a planted source that is 50 ms late per batch stands in for a slow disk or decoder.
    found = _findings(kit_python, tmp_path, tiny_dir, data_dir, "pytorch", ["pt_slow_input"])
    assert _codes(found) == ["input-bound"], found
    assert "waiting for the next batch" in found[0]["message"]

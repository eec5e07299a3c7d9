"""The one place quantities are read: real result files give figures, a missing field gives "not measured"."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from reprokit.results import metrics
from reprokit.results.metrics import NotMeasured

REPO = Path(__file__).resolve().parent.parent
COMMITTED = sorted((REPO / "reports").glob("*/results/*.json"))


@pytest.fixture(scope="module")
def committed() -> list[dict]:
    found = [json.loads(p.read_text()) for p in COMMITTED]
    assert len(found) >= 20
    return found


def test_every_quantity_of_every_committed_result_is_a_figure_or_not_measured(committed):
    for r in committed:
        for name in metrics.QUANTITIES:
            try:
                got = metrics.read(r, name)
            except NotMeasured as exc:
                assert exc.reason and exc.short
                continue
            assert isinstance(got.value, (int, float)) and got.value == got.value, (r["run_id"], name)


def test_figures_are_the_result_files_own(committed):
    r = next(r for r in committed if r["variant"] == "fixed" and r["framework"] == "pytorch")
    epochs = r["timing"]["epochs"]
    assert metrics.value(r, "samples_per_s") == r["timing"]["samples_per_s"]
    assert metrics.value(r, "total_time_s") == pytest.approx(sum(e["train_s"] + e["eval_s"] for e in epochs))
    assert metrics.value(r, "steps_per_s") == pytest.approx(
        sum(r["effective"]["train_steps_per_epoch"]) / sum(e["train_s"] for e in epochs))
    assert metrics.value(r, "step_time_p95_s") == r["timing"]["step_s"]["p95"]
    assert metrics.value(r, "final_test_loss") == r["metrics"]["epochs"][-1]["test_loss"]
    assert metrics.read(r, "peak_memory_bytes").source == r["memory"]["source"]
    with pytest.raises(NotMeasured) as info:
        metrics.read(r, "peak_memory_bytes", "allocated")
    assert info.value.hardware and info.value.short == "GPU only"


def _leaves(node: dict, prefix: str = ""):
    for k, v in node.items():
        path = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict) and v:
            yield from _leaves(v, path)
        else:
            yield path


def _without(r: dict, path: str) -> dict:
    out = copy.deepcopy(r)
    *parents, last = path.split(".")
    node = out
    for k in parents:
        node = node[k]
    del node[last]
    return out


def test_any_field_missing_reads_as_not_measured_never_a_crash(committed):
    """Schema drift: take each field of a real result away in turn; every quantity still reads or says why not."""
    r = copy.deepcopy(next(r for r in committed if r["variant"] == "fixed"))
    r["model"]["flops_per_sample"] = 1e8                     # a newer kit's field, so MFU is read too
    assert metrics.value(r, "mfu") > 0
    paths = [p for section in ("timing", "effective", "memory", "metrics", "model", "environment")
             for p in _leaves(r[section], section) if not p.startswith("environment.host")]
    assert len(paths) > 40
    for path in [*paths, "timing", "memory", "metrics", "model"]:
        broken = _without(r, path)
        for name in metrics.QUANTITIES:
            try:
                metrics.read(broken, name)
            except NotMeasured:
                pass


def test_a_failed_run_is_not_measured(committed):
    failed = {**committed[0], "status": "failed"}
    with pytest.raises(NotMeasured, match="did not finish"):
        metrics.read(failed, "samples_per_s")


def test_phase_peaks_come_from_memory_phases_only(committed):
    r = copy.deepcopy(next(r for r in committed if r["variant"] == "fixed"))
    r["memory"].pop("phases", None)                      # a result from before memory by phase
    with pytest.raises(NotMeasured, match=r"no per-phase memory peaks \(memory\.phases\)"):
        metrics.read(r, "eval_peak_memory_bytes")          # the old sampled field is not a phase peak
    r["memory"]["phases"] = [
        {"epoch": 1, "phase": "train", "peak_bytes": 700 << 20, "source": "VmHWM after clear_refs"},
        {"epoch": 1, "phase": "eval", "peak_bytes": 650 << 20, "source": "VmHWM after clear_refs"},
        {"epoch": 2, "phase": "train", "peak_bytes": 720 << 20, "source": "VmHWM after clear_refs"},
        {"epoch": 2, "phase": "eval", "peak_bytes": 900 << 20, "source": "VmHWM after clear_refs"},
    ]
    got = metrics.read(r, "eval_peak_memory_bytes")
    assert got.value == 900 << 20 and "epoch 2" in got.source and "VmHWM" in got.source
    assert metrics.value(r, "train_peak_memory_bytes") == 720 << 20
    r["memory"]["phases"] = [p for p in r["memory"]["phases"] if p["phase"] == "train"]
    with pytest.raises(NotMeasured, match="no eval phase peak"):
        metrics.read(r, "eval_peak_memory_bytes")


def test_memory_growth_is_the_least_squares_trend_after_the_first_quarter(committed):
    r = copy.deepcopy(committed[0])
    level = 500 << 20
    r["memory"]["over_steps"] = [[s, level + 1000 * s] for s in range(0, 200, 10)]
    slope, growth, (first, last) = metrics.memory_growth(r)
    assert slope == pytest.approx(1000) and (first, last) == (50, 190)
    assert growth == pytest.approx(1000 * 140 / (level + 1000 * 50))
    r["memory"]["over_steps"] = r["memory"]["over_steps"][:3]
    with pytest.raises(NotMeasured, match="a trend needs 4 or more"):
        metrics.read(r, "memory_growth")


def test_mfu_needs_the_results_own_flops(committed):
    r = copy.deepcopy(next(r for r in committed if r["environment"].get("matmul_peak_flops")))
    r["model"].pop("flops_per_sample", None)             # a result from before FLOPs were counted in every run
    with pytest.raises(NotMeasured, match="model.flops_per_sample"):
        metrics.read(r, "mfu")
    r["model"]["flops_per_sample"] = 1e8
    expected = 1e8 * r["timing"]["samples_per_s"] / r["environment"]["matmul_peak_flops"]
    assert metrics.value(r, "mfu") == pytest.approx(expected)

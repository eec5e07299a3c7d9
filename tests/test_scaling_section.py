"""The scaling section, read from a real sweep's result files (tests/fixtures/sweep/: the torchrun DDP corpus script
and Keras fit under MirroredStrategy at --devices 1,2 on this CPU's stand-in devices, as tests/test_processes_e2e.py
runs them): each framework's scaling read from the batches its runs took, its rows and ratios, the plot; and a
planted pair, the same runs with the Keras script's global batch held across the counts, flagged as comparing
different work.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from reprokit.report import document, scaling_section

SWEEP = Path(__file__).parent / "fixtures" / "sweep"


@pytest.fixture
def results() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(SWEEP.glob("*.json"))]


def _strong(results: list[dict]) -> list[dict]:
    """The Keras runs as a script that holds its global batch would have taken them: 64 at 1 device and at 2, 32
    per replica."""
    out = copy.deepcopy(results)
    for r in out:
        if r["framework"] == "tensorflow" and r["spec"].get("devices", 1) == 2:
            r["processes"]["total"]["global_batch"] = 64
            r["processes"]["total"]["per_replica_batch"] = 32
    return out


def test_each_framework_is_labelled_from_the_batches_its_runs_took(results):
    (sweep,) = scaling_section.sweeps(results).values()
    assert {fw: scaling_section.label_of(counts) for fw, counts in sweep.items()} == {"pytorch": "weak",
                                                                                      "tensorflow": "weak"}
    assert scaling_section.mismatch(sweep) is None
    assert scaling_section.label_of(_strong_counts(sweep)) == "strong"


def _strong_counts(sweep: dict) -> dict:
    counts = copy.deepcopy(sweep["tensorflow"])
    counts[2][0]["processes"]["total"]["global_batch"] = 64
    return counts


def test_a_pair_scaled_strong_and_weak_is_flagged_on_the_first_screen(results, tmp_path):
    planted = _strong(results)
    (sweep,) = scaling_section.sweeps(planted).values()
    assert scaling_section.mismatch(sweep) == ("- **Scaled differently:** PyTorch weak, TensorFlow strong: their "
                                               "ratio at more than one device compares different work.")
    report = document.write(tmp_path, "planted", planted, {}).read_text()
    answers = report[report.index("## Answers"):].split("\n## ")[0]
    assert "- **Scaled differently:** PyTorch weak, TensorFlow strong" in answers


def test_the_section_has_a_row_per_framework_and_count_a_ratio_each_count_and_a_plot(results, tmp_path):
    report = document.write(tmp_path, "sweep", results, {}).read_text()
    section = report[report.index("### Scaling, side by side"):].split("\n## ")[0].split("\n### ")[0]
    print(f"\n{section}")
    rows = [line for line in section.splitlines() if line.startswith(("| PyTorch", "| TensorFlow"))]
    assert [row.split("|")[2].strip() for row in rows] == ["1", "2", "1", "2"]
    assert all(row.split("|")[8].strip().startswith("100%") for row in rows[::2])      # each count of 1 against itself
    assert "PyTorch / TensorFlow throughput at each device count: 1: " in section
    assert "stand-in devices that share one machine's CPUs" in section
    assert (tmp_path / "at_two-scaling.png").stat().st_size > 1000
    # the other sections hold the runs at the fewest devices: no run at 2 is a repeat of one at 1
    assert "4 runs" in report.splitlines()[2]


def _share_cells(report: str) -> list[str]:
    section = report[report.index("### Scaling, side by side"):].split("\n## ")[0].split("\n### ")[0]
    return [line.split("|")[7].strip() for line in section.splitlines() if line.startswith(("| PyTorch", "| Tensor"))]


def test_a_kit_runs_spans_give_the_same_collectives_share_and_tensorflows_is_said_not_measured(results, tmp_path):
    """The PyTorch kit times its steps' spans itself (timing.backward_span_s), a probed script's come from the
    probe: the same spans give the same share. TensorFlow's step is one graph: its cells say not measured, and
    a line says why."""
    probed = document.write(tmp_path / "probed", "sweep", results, {}).read_text()
    kit = copy.deepcopy(results)
    for r in kit:
        if r["framework"] == "pytorch":
            r["timing"]["backward_span_s"] = r["probe"]["evidence"].pop("backward_span_s")
    timed = document.write(tmp_path / "kit", "sweep", kit, {}).read_text()
    cells = _share_cells(probed)
    assert cells[0] == "0%" and cells[1].endswith("%") and cells[2:] == ["not measured", "not measured"]
    assert _share_cells(timed) == cells
    assert ("Collectives and waiting: not measured for TensorFlow, whose runs did not time the inside of their steps "
            "(a step that runs as one graph or compiled function is not).") in timed

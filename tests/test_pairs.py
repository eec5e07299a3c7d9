"""Pair findings on real result files: equal settings stay silent, an undeclared difference speaks."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from reprokit.report import pair_findings as pairs

REFERENCE = Path(__file__).resolve().parent.parent / "reports" / "quick-cpu" / "results"


@pytest.fixture
def pair():
    by_fw = {}
    for path in sorted(REFERENCE.glob("*.json")):
        r = json.loads(path.read_text())
        if r["experiment"] == "vgg16_cifar10_speed" and r["variant"] == "fixed":
            by_fw[r["framework"]] = r
    return by_fw["pytorch"], by_fw["tensorflow"]


def test_declared_differences_are_info_and_nothing_else_is_flagged(pair):
    found = pairs.findings(*pair)
    assert {f["severity"] for f in found} == {"info"}
    assert any("data layout" in f["message"] and "declared" in f["message"] for f in found)


def test_an_undeclared_setting_and_another_host_are_flagged(pair):
    pt, tf = copy.deepcopy(pair)
    pt["environment"]["cpu_threads"] = {"intra_op": 8, "inter_op": 1}
    tf["environment"]["host"]["hostname"] = "elsewhere"
    found = pairs.findings(pt, tf)
    warnings = [f["message"] for f in found if f["severity"] == "warning"]
    assert any("CPU threads" in m and "not declared" in m for m in warnings)
    assert any("different hosts" in m for m in warnings)

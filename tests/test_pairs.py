"""Pair findings on real result files: equal settings stay silent, an undeclared difference speaks."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from reprokit.report import pair_findings as pairs
from reprokit.report import settings_table

REFERENCE = Path(__file__).resolve().parent.parent / "reports" / "quick-cpu" / "results"


@pytest.fixture
def pair():
    by_fw = {}
    for path in sorted(REFERENCE.glob("*.json")):
        r = json.loads(path.read_text())
        if r["experiment"] == "vgg16_cifar10_speed" and r["variant"] == "fixed":
            by_fw[r["framework"]] = r
    return by_fw["pytorch"], by_fw["tensorflow"]


def test_only_a_keyed_entry_declares_a_setting(pair):
    """The [[differences]] entries without their keys declare nothing (they are shown); with their keys, every
    difference is declared."""
    pt, tf = copy.deepcopy(pair)
    for r in (pt, tf):          # as a result written since keys: its settings read back under environment.settings
        r["environment"]["settings"] = settings_table.settings_of(r["environment"])
    for d in pt["spec"]["differences"]:
        d.pop("key", None)
    found = pairs.findings(pt, tf)
    assert {f["message"].split(" (")[0] for f in found if f["severity"] == "warning"} == {"data layout", "execution"}
    for d in pt["spec"]["differences"]:
        d.update({"data layout": {"key": "data_layout"}, "execution": {"key": "execution"}}.get(d["field"], {}))
    found = pairs.findings(pt, tf)
    assert {f["severity"] for f in found} == {"info"}
    assert any(f["message"].startswith("data layout (data_layout): PyTorch NCHW, TensorFlow NHWC (declared: ")
               for f in found)


def test_a_result_written_before_keys_is_declared_by_its_entrys_whole_field(pair):
    """The committed reference results predate keys and environment.settings: their entries declare the setting
    their field names as the kit then named it, whole ("data layout"), and nothing else."""
    found = pairs.findings(*pair)
    assert {f["severity"] for f in found} == {"info"}
    assert any("(declared: [[differences]] data layout (by its field: a result written before keys))" in f["message"]
               for f in found)
    pt, tf = copy.deepcopy(pair)
    pt["spec"]["differences"] = tf["spec"]["differences"] = [{**d, "field": d["field"] + " order"}
                                                             for d in pt["spec"]["differences"]]
    assert {f["message"].split(" (")[0] for f in pairs.findings(pt, tf) if f["severity"] == "warning"} == {
        "data layout", "execution"}


def test_an_undeclared_setting_and_another_host_are_flagged(pair):
    pt, tf = copy.deepcopy(pair)
    pt["environment"]["cpu_threads"] = {"intra_op": 8, "inter_op": 1}
    if "settings" in pt["environment"]:          # a result with environment.settings: its own reading
        pt["environment"]["settings"]["threads.intra_op"]["value"] = 8
    tf["environment"]["host"]["hostname"] = "elsewhere"
    found = pairs.findings(pt, tf)
    warnings = [f["message"] for f in found if f["severity"] == "warning"]
    assert any(m.startswith("intra-op threads (threads.intra_op): PyTorch 8") and "(undeclared: " in m
               for m in warnings)
    assert any("different hosts" in m for m in warnings)

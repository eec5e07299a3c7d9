"""The settings table on real result files, and the keys that declarations, the schema and the docs share."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from reprokit.kits.contract.settings import KEYS
from reprokit.report import settings_table

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "reports" / "quick-cpu" / "results"


def _rows(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[4:]]


def test_the_schema_and_the_docs_know_every_key():
    schema = json.loads((ROOT / "reprokit" / "schemas" / "experiment.schema.json").read_text())
    keys = schema["properties"]["differences"]["items"]["properties"]["key"]["enum"]
    assert set(keys) == {*KEYS, *(k.split(".")[0] for k in KEYS if "." in k)}
    page = (ROOT / "docs" / "settings.md").read_text()
    assert all(f"| `{key}` |" in page for key in KEYS)


def test_a_setting_that_differs_between_variants_gets_a_row_per_variant():
    """A row per setting; a variant whose PyTorch run used other threads splits that row alone, and marks it
    undeclared, as the data layout whose entry lost its key."""
    by_fw = {}
    for path in sorted(REFERENCE.glob("*.json")):
        r = json.loads(path.read_text())
        if r["experiment"] == "vgg16_cifar10_speed" and r["variant"] == "fixed":
            by_fw[r["framework"]] = [r]
            r["environment"]["settings"] = settings_table.settings_of(r["environment"])    # as written since keys
            for d in r["spec"]["differences"]:
                d.pop("key", None)
    other = copy.deepcopy(by_fw)
    other["pytorch"][0]["environment"]["settings"]["threads.intra_op"]["value"] = 7
    rows = _rows(settings_table.section({"fixed": by_fw, "threads": other}))
    threads = [r for r in rows if r[0] == "intra-op threads (`threads.intra_op`)"]
    assert [r[1] for r in threads] == ["`fixed`", "`threads`"] and threads[1][2] == "7"
    assert threads[0][-1] == "same" and threads[1][-1] == "**undeclared**"
    layout = next(r for r in rows if r[0] == "data layout (`data_layout`)")
    assert layout[1:] == ["all", "NCHW", "NHWC", "**undeclared**"]


def test_keys_declare_a_setting_or_its_group_and_labels_declare_nothing():
    spec = {"differences": [{"field": "TF32", "key": "tf32", "why": "as posted"},
                            {"field": "execution", "why": "no key"}], "pitfalls": ["pt_blocking_copy"]}
    assert settings_table.declaration(spec, "tf32.matmul") == settings_table.declaration(spec, "tf32.convolution") \
        == "[[differences]] TF32"
    assert settings_table.declaration(spec, "execution") is None
    assert settings_table.declaration(spec, "loader.pin_memory") == "pitfall pt_blocking_copy"
    assert settings_table.declaration(spec, "loader.workers") is None

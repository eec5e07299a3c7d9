"""Fast checks of the bench's own parts (no framework, no training)."""
from __future__ import annotations

import json
import sys

from reprokit import results
from reprokit.provenance import REPO
from reprokit.store import Store

sys.path.insert(0, str(REPO / "benchmarks"))

import bench_kit_overhead

from kits import bench

REFERENCE = sorted((REPO / "reports" / "quick-cpu" / "results").glob("*.json"))


def test_fan_out_writes_valid_distinct_result_files(tmp_path):
    sources = [json.loads(p.read_text()) for p in REFERENCE]
    bench_kit_overhead.fan_out(sources, 10, tmp_path)
    copies = Store(tmp_path).all()                   # raises on any invalid file
    assert len(copies) == 10 and len({r["run_id"] for r in copies}) == 10
    assert all(results.problems(r) is None and r["spec"]["run_id"] == r["run_id"] for r in copies)
    assert {r["repeat"] for r in copies} == {0, 1, 2}


def test_kit_spec_is_one_epoch_of_warmup_plus_steps():
    spec = json.loads(REFERENCE[0].read_text())["spec"]
    cut = bench.kit_spec(spec, warmup=5, steps=20)
    assert cut["train"]["epochs"] == 1 and cut["train"]["warmup_steps"] == 5
    assert cut["train"]["max_steps_per_epoch"] == 25
    assert cut["data"]["test_samples"] <= 2 * cut["train"]["eval_batch_size"]
    assert spec["train"]["epochs"] != 1                 # the original is left alone

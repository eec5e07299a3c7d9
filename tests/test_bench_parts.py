"""Fast checks of the bench's and gpu_check's own parts (no framework, no training).

gpu_check's stand-ins replace jsonschema and tabulate on an offline GPU box
without them; they must agree with the real packages on this project's files.
"""
from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import json
import sys

import jsonschema
import pytest
from tabulate import tabulate

from reprokit import results
from reprokit.provenance import REPO
from reprokit.store import Store

sys.path.insert(0, str(REPO / "benchmarks"))

import bare_loops
import bench_kit_overhead

SCHEMAS = REPO / "reprokit" / "schemas"
REFERENCE = sorted((REPO / "reports" / "quick-cpu" / "results").glob("*.json"))


def _gpu_check():
    loader = importlib.machinery.SourceFileLoader("gpu_check", str(REPO / "scripts" / "gpu_check"))
    spec = importlib.util.spec_from_loader("gpu_check", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def standin():
    return _gpu_check()._jsonschema_standin()["jsonschema"]


def _mutations(doc, path=(), limit_items=2):
    """Copies of doc, each broken (or not) in one place: wrong types, a key removed, a key added."""
    def put(value):
        out = copy.deepcopy(doc)
        if not path:
            return value
        node = out
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value
        return out

    node = doc
    for p in path:
        node = node[p]
    for wrong in ("x", None, -1, 1.5, True, [], {}):
        yield put(wrong)
    if isinstance(node, dict):
        yield put({**node, "zz_unknown": 1})
        for key in node:
            smaller = dict(node)
            del smaller[key]
            yield put(smaller)
            yield from _mutations(doc, (*path, key), limit_items)
    elif isinstance(node, list):
        for i in range(min(len(node), limit_items)):
            yield from _mutations(doc, (*path, i), limit_items)


def _agree(standin, schema: dict, docs: list) -> int:
    real = jsonschema.Draft202012Validator(schema)
    mine = standin.Draft202012Validator(schema)
    for doc in docs:
        assert real.is_valid(doc) == mine.is_valid(doc), json.dumps(doc)[:300]
    return len(docs)


def test_standin_validator_agrees_with_jsonschema_on_result_files(standin):
    schema = json.loads((SCHEMAS / "result.schema.json").read_text())
    doc = json.loads(REFERENCE[0].read_text())
    assert standin.Draft202012Validator(schema).is_valid(doc)
    docs = list(_mutations(doc, limit_items=1))
    assert _agree(standin, schema, docs) > 500
    assert any(not jsonschema.Draft202012Validator(schema).is_valid(d) for d in docs)


def test_standin_validator_agrees_with_jsonschema_on_experiments(standin):
    import tomllib

    from reprokit.experiments import BUILTIN_DIR

    schema = json.loads((SCHEMAS / "experiment.schema.json").read_text())
    for path in sorted(BUILTIN_DIR.glob("*.toml")):
        doc = tomllib.loads(path.read_text())
        _agree(standin, schema, list(_mutations(doc, limit_items=2)))


def test_standin_best_match_names_the_problem(standin):
    schema = json.loads((SCHEMAS / "result.schema.json").read_text())
    doc = json.loads(REFERENCE[0].read_text())
    del doc["run_id"]
    error = standin.exceptions.best_match(standin.Draft202012Validator(schema).iter_errors(doc))
    assert error is not None and "run_id" in error.message and error.validator == "required"


def test_standin_tabulate_matches_the_real_cells():
    rows = [["a", 1, "0.5%", None], ["b|c", 12, "1,234 MiB", "x"]]
    headers = ["what", "n", "size", "note"]
    real = tabulate(rows, headers=headers, tablefmt="github").splitlines()
    mine = _gpu_check().tabulate_github(rows, headers=headers, tablefmt="github").splitlines()

    def cells(line):
        return [c.strip() for c in line.strip("|").split(" | ")]
    assert len(real) == len(mine) == 4
    assert [cells(x) for i, x in enumerate(real) if i != 1] == [cells(x) for i, x in enumerate(mine) if i != 1]
    assert set(mine[1]) <= {"|", "-"}


def test_fan_out_writes_valid_distinct_result_files(tmp_path):
    sources = [json.loads(p.read_text()) for p in REFERENCE]
    bench_kit_overhead.fan_out(sources, 10, tmp_path)
    copies = Store(tmp_path).all()                   # raises on any invalid file
    assert len(copies) == 10 and len({r["run_id"] for r in copies}) == 10
    assert all(results.problems(r) is None and r["spec"]["run_id"] == r["run_id"] for r in copies)
    assert {r["repeat"] for r in copies} == {0, 1, 2}


def test_kit_spec_is_one_epoch_of_warmup_plus_steps():
    spec = json.loads(REFERENCE[0].read_text())["spec"]
    cut = bare_loops.kit_spec(spec, warmup=5, steps=20)
    assert cut["train"]["epochs"] == 1 and cut["train"]["warmup_steps"] == 5
    assert cut["train"]["max_steps_per_epoch"] == 25
    assert cut["data"]["test_samples"] <= 2 * cut["train"]["eval_batch_size"]
    assert spec["train"]["epochs"] != 1                 # the original is left alone

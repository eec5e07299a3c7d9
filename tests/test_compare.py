"""compare: two result sets paired by configuration, never across specs that differ in what ran."""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest

from reprokit.errors import UserError
from reprokit.report import compare
from reprokit.results import metrics

REAL = Path(__file__).resolve().parent.parent / "reports" / "quick-cpu" / "results"


@pytest.fixture(scope="module")
def real() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(REAL.glob("*.json"))]


def repeats(base: dict, n: int, scale: float = 1.0, edit=None) -> list[dict]:
    """n copies of a real result as repeats, throughput spread by ±2% and scaled."""
    out = []
    for i in range(n):
        r = copy.deepcopy(base)
        r["repeat"] = r["spec"]["repeat"] = i
        r["timing"]["samples_per_s"] *= scale * (1 + 0.02 * (i - n / 2) / n)
        if edit:
            edit(r)
        r["run_id"] = r["spec"]["run_id"] = hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()[:16]
        out.append(r)
    return out


def test_same_specs_pair_metric_by_metric_and_a_real_change_is_named(real):
    base = real[0]
    a = repeats(base, 5)

    def elsewhere(r):             # another machine, image and commit: still the same experiment
        r["spec"]["device"] = "gpu"
        r["spec"]["provenance"] = {**r["spec"]["provenance"], "code_commit": "f" * 40, "image": "other"}
    b = repeats(base, 5, scale=1.5, edit=elsewhere)
    c = compare.compare(a, b)
    assert not c.not_comparable and not c.only_a and not c.only_b
    rows = {r.metric: r for r in c.rows}
    assert set(rows) <= set(compare.METRICS) and "samples_per_s" in rows
    throughput = rows["samples_per_s"]
    expected = (metrics.collect(b, "samples_per_s").median() / metrics.collect(a, "samples_per_s").median())
    assert throughput.ratio.value == pytest.approx(expected)
    assert throughput.ratio.low <= expected <= throughput.ratio.high
    assert throughput.test.significant and throughput.verdict == "better"          # higher samples/s is better
    assert rows["peak_memory_bytes"].test.significant is False
    assert rows["peak_memory_bytes"].verdict == "no significant difference"
    text = compare.render(c, "ref", "mine")
    assert "mine / ref" in text and "Mann-Whitney U" in text and "better" in text


def test_specs_that_differ_in_what_ran_are_flagged_and_never_paired(real):
    base = real[0]

    def wider(r):
        r["spec"]["model"] = {**r["spec"]["model"], "width_multiplier": 1.0}
    c = compare.compare(repeats(base, 3), repeats(base, 3, edit=wider))
    assert not c.rows
    [(key, why)] = c.not_comparable
    assert key == compare.key(base)
    assert why == [f"model.width_multiplier: {base['spec']['model']['width_multiplier']!r} vs 1.0"]
    assert "Not comparable" in compare.render(c) and "model.width\\_multiplier" in compare.render(c)


def test_too_few_repeats_are_said_and_configurations_in_one_set_only_are_listed(real):
    a, b = repeats(real[0], 3), repeats(real[0], 3, scale=2.0) + repeats(real[1], 1)
    c = compare.compare(a, b)
    row = next(r for r in c.rows if r.metric == "samples_per_s")
    assert row.test.p is None and row.verdict == "too few repeats to tell"
    assert c.only_b == [compare.key(real[1])] and "Only in B" in compare.render(c)


def test_a_result_set_is_a_report_folder_or_a_folder_of_results(tmp_path):
    report_folder = REAL.parent
    assert {r["run_id"] for r in compare.load(report_folder)} == {r["run_id"] for r in compare.load(REAL)}
    with pytest.raises(UserError, match=r"no result files here or in .*results; give a report folder"):
        compare.load(tmp_path)


def test_a_pair_across_framework_builds_is_paired_and_said(real):
    """A GPU report on PyTorch's CUDA 12 flavour against one on its CUDA 13 build: the same experiment, other
    torch releases; paired, and the ratio says it mixes them."""
    def build(flavor):
        def edit(r):
            r["provenance"] = {**r["provenance"], "flavor": flavor}
        return edit
    c = compare.compare(repeats(real[0], 3, edit=build("cuda")), repeats(real[0], 3, edit=build("cuda12")))
    assert c.rows and c.across_builds == [(compare.key(real[0]), "cuda", "cuda12")]
    assert "A ran the cuda build, B the cuda12 build" in compare.render(c)
    same = compare.compare(repeats(real[0], 3, edit=build("cuda")), repeats(real[0], 3, edit=build("cuda")))
    assert not same.across_builds and "Across framework builds" not in compare.render(same)

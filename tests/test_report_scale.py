"""A report of many results: what it computes once, and figures over more repeats than a float's range allows
2^n for (the bench's report of 10,000 results has over 2,000 repeats per configuration)."""
from __future__ import annotations

import json

import numpy as np
from checkout import REPO

from reprokit import report
from reprokit.plan.experiments import BUILTIN_DIR, discover
from reprokit.report import decomposition
from reprokit.results import stats

REAL = REPO / "reports" / "quick-cpu" / "results"


def test_a_report_computes_each_experiments_decompositions_once(tmp_path, monkeypatch):
    """report.md's section and first-screen line, the waterfall and details.md all show them: one computation."""
    results = [json.loads(p.read_text()) for p in sorted(REAL.glob("*.json"))]
    asked: list[str] = []
    compute = decomposition.decompositions
    monkeypatch.setattr(decomposition, "decompositions", lambda exp, *rest: asked.append(exp) or compute(exp, *rest))
    report.write(tmp_path, "t", results, discover([BUILTIN_DIR]))
    assert sorted(asked) == sorted({r["experiment"] for r in results})


def test_brackets_and_tests_over_thousands_of_repeats():
    rng = np.random.default_rng(0)
    a, b = list(rng.normal(10, 1, 3000)), list(rng.normal(11, 1, 2000))
    e = stats.estimate(a)
    assert e.kind == "interval" and e.low < e.median < e.high and 0.95 <= e.coverage < 0.96
    assert stats.coverage(3000, 1) == 1.0 and stats.coverage(10, 5) == 1 - 2 * (1 + 10 + 45 + 120 + 210) / 1024
    r = stats.ratio(a, b)
    assert r.low < r.value < r.high and r.coverage >= 0.95 ** 2
    assert stats.smallest_p(3000, 2000) == 0.0             # 2 / C(5000, 2000): below the smallest float
    assert stats.difference(a, b).significant in (True, None)          # None where scipy is missing

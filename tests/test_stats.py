"""The repeat statistics: what is printed covers as often as the report says, and a test is named or refused."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from reprokit.results import stats


def _simulate(n: int, trials: int = 4000, seed: int = 1) -> np.ndarray:
    """trials x n draws of a skewed distribution whose median is known: lognormal(0, 1) has median 1."""
    return np.random.default_rng(seed).lognormal(0.0, 1.0, size=(trials, n))


@pytest.mark.parametrize("n", [3, 5])
def test_below_six_repeats_the_bracket_is_the_range_and_covers_as_stated(n):
    e = stats.estimate([float(x) for x in range(1, n + 1)])
    assert (e.low, e.high, e.kind) == (1.0, float(n), "range")
    assert e.coverage == pytest.approx(1 - 2 * 0.5 ** n)          # 75% at 3, 93.75% at 5
    assert "range 1.0–" in e.text() and f"{n} repeats" in e.text() and "interval" not in e.text()
    draws = _simulate(n)
    covered = np.mean([est.low <= 1.0 <= est.high for est in map(stats.estimate, draws[:1500])])
    assert covered == pytest.approx(e.coverage, abs=0.03)


@pytest.mark.parametrize("n", [6, 10, 25])
def test_from_six_repeats_the_interval_is_the_narrowest_with_95_percent(n):
    draws = _simulate(n)
    e = stats.estimate(draws[0])
    assert e.kind == "interval" and e.coverage >= 0.95 and f"{e.coverage:.0%} interval" in e.text()
    # its order statistics: the coverage of the next narrower pair is below 95% (computed here from the pmf)
    xs = np.sort(draws[0])
    k = int(np.searchsorted(xs, e.low)) + 1
    assert xs[n - k] == e.high

    def binomial_coverage(j: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(j)) / 2 ** n
    assert e.coverage == pytest.approx(binomial_coverage(k))
    assert k == n // 2 or binomial_coverage(k + 1) < 0.95
    covered = np.mean([est.low <= 1.0 <= est.high for est in map(stats.estimate, draws[:1500])])
    assert covered >= e.coverage - 0.03


def test_a_single_repeat_has_no_bracket():
    e = stats.estimate([7.0])
    assert e.kind == "none" and e.coverage is None and e.text() == "7.0"
    r = stats.ratio([7.0], [3.5, 3.6])
    assert r.value == pytest.approx(7.0 / 3.55) and r.low is None and r.text() == f"{7.0 / 3.55:.2f}x"


def test_a_ratio_bracket_divides_the_two_brackets_and_covers_at_least_their_product():
    a, b = [10.0, 12.0, 11.0], [5.0, 6.0, 4.0]
    r = stats.ratio(a, b)
    assert (r.low, r.high) == (10.0 / 6.0, 12.0 / 4.0) and r.value == pytest.approx(11.0 / 5.0)
    assert r.coverage == pytest.approx(0.75 * 0.75) and "pairwise range" in r.text() and "≥56%" in r.text()
    # simulated: both lognormal(0, 1), so the true ratio of medians is 1
    da, db = _simulate(3, 1500, seed=2), _simulate(3, 1500, seed=3)
    covered = np.mean([q.low <= 1.0 <= q.high for q in map(stats.ratio, da, db)])
    assert covered >= r.coverage - 0.03


def test_three_against_three_cannot_reach_five_percent_and_says_so():
    assert stats.smallest_p(3, 3) == pytest.approx(0.1)          # 2 / C(6, 3)
    t = stats.difference([1.0, 2.0, 3.0], [10.0, 11.0, 12.0])      # as separated as they can be
    assert t.p is None and t.significant is None and "no test can reach p < 0.05" in t.text()
    assert "single repeat" in stats.difference([1.0], [2.0, 3.0]).text()


def _exact_permutation_p(a: list[float], b: list[float]) -> float:
    """Two-sided p of the rank-sum statistic over every split of the pooled values (no ties)."""
    pooled = sorted(a + b)
    rank = {v: i + 1 for i, v in enumerate(pooled)}
    observed = sum(rank[v] for v in a)
    centre = len(a) * (len(pooled) + 1) / 2
    sums = [sum(c) for c in itertools.combinations(range(1, len(pooled) + 1), len(a))]
    return sum(abs(s - centre) >= abs(observed - centre) - 1e-9 for s in sums) / len(sums)


def test_the_mann_whitney_test_is_the_exact_permutation_test_at_small_n():
    fast = [200.0, 204.0, 198.0, 201.0, 199.0]
    slow = [100.0, 101.0, 99.0, 102.0, 98.0]
    t = stats.difference(fast, slow)
    assert t.p == pytest.approx(_exact_permutation_p(fast, slow)) and t.significant
    assert "Mann-Whitney U" in t.text() and "significant at 0.05" in t.text()
    mixed_a, mixed_b = [100.0, 110.0, 90.0, 105.0, 95.0], [102.0, 93.0, 108.0, 97.0, 100.5]
    noise = stats.difference(mixed_a, mixed_b)
    assert noise.p == pytest.approx(_exact_permutation_p(mixed_a, mixed_b)) and noise.significant is False

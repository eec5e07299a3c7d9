"""The repeat statistics: intervals only with enough repeats, ratios significant only when they should be."""
from __future__ import annotations

from reprokit import stats


def test_few_repeats_give_a_range_and_no_interval():
    e = stats.estimate([10.0, 12.0])
    assert e.low is None and e.median == 11.0 and e.minimum == 10.0 and e.maximum == 12.0
    assert "no interval" in e.text()
    r, significant = stats.ratio([10.0, 12.0], [5.0, 6.0])
    assert significant is None and r.median == 2.0


def test_interval_contains_the_median_and_is_reproducible():
    values = [100.0, 104.0, 98.0, 101.0, 99.5]
    a, b = stats.estimate(values), stats.estimate(values)
    assert a == b
    assert a.low <= a.median <= a.high and a.low >= min(values) and a.high <= max(values)


def test_a_clear_difference_is_significant_and_noise_is_not():
    fast = [200.0, 204.0, 198.0, 201.0, 199.0]
    slow = [100.0, 101.0, 99.0, 102.0, 98.0]
    r, significant = stats.ratio(fast, slow)
    assert significant is True and 1.9 < r.low <= r.median <= r.high < 2.1
    same_a = [100.0, 110.0, 90.0, 105.0, 95.0]
    same_b = [102.0, 93.0, 108.0, 97.0, 100.0]
    _, significant = stats.ratio(same_a, same_b)
    assert significant is False

"""Figures over repeats, said honestly: the median, an interval whose real coverage is stated, a named test.

- One configuration: the median of its repeats. With fewer than ``MIN_INTERVAL`` repeats the
  report prints the range of the repeats and calls it that: as an interval for the median it
  covers with probability 1 - 2^(1-n) (75% at n=3, 94% at n=5). From ``MIN_INTERVAL`` on it
  prints the distribution-free interval between two order statistics, the narrowest whose
  coverage (exact, from the binomial distribution) is at least 95%, and states that coverage.
- A ratio of two medians (PyTorch / TensorFlow, or B / A): the quotient of the two intervals,
  low over high and high over low. It covers the ratio of the true medians whenever both
  intervals cover theirs, so with at least the product of their coverages, which is stated.
- A difference: Mann-Whitney U, two-sided (scipy). No rank or permutation test of n against m
  repeats can give p below 2 / C(n+m, n); where that is 0.05 or more (3 against 3: 0.10) the
  report says no test can reach p < 0.05, instead of calling the difference not significant.
  On a host without scipy the difference is said to be not tested, never given a p-value.
"""
from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np

MIN_INTERVAL = 6            # repeats from which an order-statistic interval is printed; below, the range
LEVEL = 0.95
ALPHA = 0.05
NO_SCIPY = "scipy is not installed"


def optional(name: str) -> ModuleType | None:
    """The module ``name``, or None where this host cannot import it (a bare GPU box reports without it)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


# The one import of scipy: the Mann-Whitney U test, where this host has scipy.
_SCIPY_STATS = optional("scipy.stats")
_BRACKETS = ("Figures are medians over repeats. With fewer than 6 repeats the bracket is the range of the repeats, "
             "which covers the median with probability 1 - 2^(1-n) (75% at 3, 94% at 5); from 6 on it is the "
             "order-statistic interval for the median with at least 95% coverage (exact, binomial), and the "
             "coverage is printed. A ratio's bracket divides the two brackets (low over high, high over low): it "
             "covers the ratio of medians with at least the product of their coverages. ")
_TESTED = ("Differences are tested with the two-sided Mann-Whitney U test (scipy); with too few repeats for any "
           "such test to reach p < 0.05 (3 against 3 cannot: its smallest p is 0.10) the report says so.")
_UNTESTED = (f"Differences are not tested: {NO_SCIPY} on this host (pip install scipy), so no p-value is given.")
METHOD = _BRACKETS + (_TESTED if _SCIPY_STATS else _UNTESTED)


@functools.cache      # a report asks again for each figure of the same count of repeats
def coverage(n: int, k: int) -> float:
    """P(X(k) <= median <= X(n+1-k)) for n independent draws of a continuous distribution."""
    # Integer over integer: 2.0 ** n and a float times a tail overflow from n = 1024 repeats on.
    total: int = 2 ** n
    return 1.0 - 2 * sum(math.comb(n, i) for i in range(k)) / total


@functools.cache
def _order_index(n: int) -> int:
    """The largest k (1-based) whose interval X(k)..X(n+1-k) still covers at LEVEL or more."""
    k, tail, total = 1, 1, 2 ** n         # tail: C(n, 0) + ... + C(n, k - 1), exact integers
    while k + 1 <= n // 2:
        tail_next = tail + math.comb(n, k)
        if 1.0 - 2 * tail_next / total < LEVEL:
            break
        k, tail = k + 1, tail_next
    return k


@dataclass(frozen=True)
class Estimate:
    median: float
    low: float
    high: float
    n: int
    coverage: float | None          # of [low, high] for the median; None for a single repeat

    @property
    def kind(self) -> str:
        return "none" if self.n < 2 else "range" if self.n < MIN_INTERVAL else "interval"

    def text(self, show: Callable[[float], str] = "{:,.1f}".format) -> str:
        body = show(self.median)
        if self.kind == "none":
            return body
        bracket = f"{show(self.low)}–{show(self.high)}"
        if self.kind == "range":
            return f"{body} (range {bracket}, {self.n} repeats)"
        return f"{body} ({self.coverage:.0%} interval {bracket})"


def estimate(values: list[float] | tuple[float, ...]) -> Estimate:
    xs = np.sort(np.asarray(values, dtype=np.float64))
    n = len(xs)
    if n == 0:
        raise ValueError("no values to estimate from")
    if n == 1:
        return Estimate(float(xs[0]), float(xs[0]), float(xs[0]), 1, None)
    k = 1 if n < MIN_INTERVAL else _order_index(n)
    return Estimate(float(np.median(xs)), float(xs[k - 1]), float(xs[n - k]), n, coverage(n, k))


@dataclass(frozen=True)
class Ratio:
    value: float
    low: float | None
    high: float | None
    coverage: float | None          # at least this; None without a bracket
    n: tuple[int, int]

    def bracket(self) -> str:
        """' (pairwise range low–high, ≥coverage)' below MIN_INTERVAL repeats a side, ' (≥coverage interval
        low–high)' from there, or nothing where a side has a single repeat."""
        if self.low is None:
            return ""
        span = f"{self.low:.2f}–{self.high:.2f}"
        if min(self.n) < MIN_INTERVAL:
            return f" (pairwise range {span}, ≥{self.coverage:.0%})"
        return f" (≥{self.coverage:.0%} interval {span})"

    def text(self) -> str:
        return f"{self.value:.2f}x{self.bracket()}"


def ratio(a: list[float] | tuple[float, ...], b: list[float] | tuple[float, ...]) -> Ratio:
    """median(a) / median(b), bracketed by the quotient of the two brackets where both sides have one."""
    ea, eb = estimate(a), estimate(b)
    value = ea.median / eb.median if eb.median else math.inf
    if ea.coverage is None or eb.coverage is None or eb.low <= 0:
        return Ratio(value, None, None, None, (ea.n, eb.n))
    return Ratio(value, ea.low / eb.high, ea.high / eb.low, ea.coverage * eb.coverage, (ea.n, eb.n))


@dataclass(frozen=True)
class Test:
    p: float | None                 # None: too few repeats for any test to reach ALPHA, or not tested
    smallest_p: float
    n: tuple[int, int]
    not_tested: str | None = None   # why no test was made where the repeats allow one

    @property
    def significant(self) -> bool | None:
        return None if self.p is None else self.p < ALPHA

    def text(self) -> str:
        a, b = self.n
        if self.not_tested:
            return f"not tested: {self.not_tested}"
        if self.p is None:
            return (f"{a} vs {b} repeats: no test can reach p < {ALPHA:g}" if min(a, b) > 1
                    else "a single repeat: no test")
        return (f"Mann-Whitney U p = {self.p:.2g}: " +
                ("significant" if self.significant else "not significant") + f" at {ALPHA:g}")


def smallest_p(n: int, m: int) -> float:
    """The smallest two-sided p-value any rank or permutation test of n against m values can give."""
    return min(1.0, 2 / math.comb(n + m, n))        # int over int: no overflow past 1,000 repeats


def difference(a: list[float] | tuple[float, ...], b: list[float] | tuple[float, ...]) -> Test:
    """Whether a and b differ: the two-sided Mann-Whitney U test, where the repeats allow one and scipy is here."""
    n, m = len(a), len(b)
    floor = smallest_p(n, m)
    if floor >= ALPHA:
        return Test(None, floor, (n, m))
    if _SCIPY_STATS is None:
        return Test(None, floor, (n, m), NO_SCIPY)
    return Test(float(_SCIPY_STATS.mannwhitneyu(a, b, alternative="two-sided").pvalue), floor, (n, m))

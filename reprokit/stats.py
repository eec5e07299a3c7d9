"""Figures over repeats: the median with a bootstrap 95% interval, and framework ratios.

Declared method: percentile bootstrap of the median (10,000 resamples, fixed
seed, so a report renders the same twice). A ratio's interval resamples each
framework's repeats independently. Fewer than MIN_REPEATS repeats give the
range and no interval.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_REPEATS = 3
RESAMPLES = 10_000
METHOD = (f"median over repeats; 95% interval by percentile bootstrap ({RESAMPLES:,} resamples, seed 0); "
          f"no interval with fewer than {MIN_REPEATS} repeats")


@dataclass(frozen=True)
class Estimate:
    median: float
    low: float | None          # 95% interval, None when there are too few repeats
    high: float | None
    n: int
    minimum: float
    maximum: float

    def text(self, fmt: str = "{:,.1f}") -> str:
        body = fmt.format(self.median)
        if self.low is not None:
            return f"{body} [{fmt.format(self.low)}, {fmt.format(self.high)}]"
        if self.n > 1:
            return f"{body} (range {fmt.format(self.minimum)}-{fmt.format(self.maximum)}, n={self.n}, no interval)"
        return body


def _boot_medians(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, len(values), size=(RESAMPLES, len(values)))
    return np.median(values[idx], axis=1)


def estimate(values: list[float]) -> Estimate:
    arr = np.asarray(values, dtype=np.float64)
    low = high = None
    if len(arr) >= MIN_REPEATS:
        low, high = (float(v) for v in np.percentile(_boot_medians(arr, np.random.default_rng(0)), [2.5, 97.5]))
    return Estimate(float(np.median(arr)), low, high, len(arr), float(arr.min()), float(arr.max()))


def ratio(a: list[float], b: list[float]) -> tuple[Estimate, bool | None]:
    """median(a)/median(b) with its interval, and whether it differs from 1 (None: too few repeats)."""
    arr_a, arr_b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    point = float(np.median(arr_a) / np.median(arr_b))
    n = min(len(arr_a), len(arr_b))
    if n < MIN_REPEATS:
        spread = arr_a[:, None] / arr_b[None, :]
        return Estimate(point, None, None, n, float(spread.min()), float(spread.max())), None
    rng = np.random.default_rng(0)
    boots = _boot_medians(arr_a, rng) / _boot_medians(arr_b, rng)
    low, high = (float(v) for v in np.percentile(boots, [2.5, 97.5]))
    return Estimate(point, low, high, n, float(boots.min()), float(boots.max())), not (low <= 1.0 <= high)

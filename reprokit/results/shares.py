"""Each factor's share of the gap between two variants: how much of log R(as_posted) - log R(fixed) each pitfall
(and as_posted's numerics) accounts for, R being one framework's figure over another's.

From an ablation's single changes (reprokit/plan/plan.py variants_of), per factor f:

- added alone, a_f = log R(+f) - log R(fixed); removed alone, r_f = log R(as_posted) - log R(-f);
- its share, s_f = (a_f + r_f) / 2: the Shapley value over the two orders in which the single changes put f,
  first and last. A pair of factors that interact splits their interaction between the two;
- the interaction, the gap less every share: what the single changes leave unexplained (interactions of three
  or more factors); and per factor r_f - a_f, how far its effect depends on the other factors being there.

Intervals: a percentile bootstrap (95%, ``RESAMPLES`` resamples, seeded): each configuration's repeats are
resampled on their own, the same draw wherever one run set stands for several variants, and every figure is
computed from each draw. A configuration with a single repeat resamples its epochs instead, for the per-epoch
time quantities: that interval shows epoch-to-epoch noise, not run-to-run. Otherwise a figure has no interval.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from reprokit.results import metrics
from reprokit.results import runs as run_groups
from reprokit.results.metrics import NotMeasured
from reprokit.results.runs import ADDED, FIXED, NUMERICS, POSTED, REMOVED

RESAMPLES = 2000
LEVEL = 0.95
SEED = 24
# Time quantities whose epochs can stand in for repeats (a single run): the per-epoch figure, or all epochs'.
PER_EPOCH = {"epoch_time_s": ("train_s", "eval_s"), "train_time_per_epoch_s": ("train_s",),
             "eval_time_per_epoch_s": ("eval_s",), "total_time_s": ("train_s", "eval_s")}
SUMMED = {"total_time_s"}
REPEATS, EPOCHS, NONE = "repeats", "epochs of single runs", "none"
ByVariant = Mapping[str, Mapping[str, list[dict[str, Any]]]]


@dataclass(frozen=True)
class Span:
    """A figure in log units (a log ratio), with its bootstrap interval where the runs give one."""
    value: float
    low: float | None = None
    high: float | None = None

    @property
    def ratio(self) -> float:
        return math.exp(self.value)

    def holds(self, x: float) -> bool:
        return self.low is not None and self.high is not None and self.low <= x <= self.high

    def text(self) -> str:
        """'1.25x (1.20–1.31)' as a factor on the ratio; no bracket without an interval."""
        if self.low is None or self.high is None:
            return f"{_factor(self.value)}x"
        return f"{_factor(self.value)}x ({_factor(self.low)}–{_factor(self.high)})"


def _factor(log_value: float) -> str:
    """exp(log_value) to two decimals, or two significant digits where that would show 0.00 or run long."""
    x = math.exp(log_value)
    return f"{x:.2f}" if 0.01 <= x < 1000 else f"{x:.2g}"


@dataclass(frozen=True)
class Share:
    factor: str             # a pitfall's name, or NUMERICS
    added: Span             # log R(+f) - log R(fixed)
    removed: Span           # log R(as_posted) - log R(-f)
    share: Span             # their mean
    depends: Span           # removed - added: how far f's effect depends on the other factors
    beyond_half: Span       # share - gap / 2, toward the gap's side: above 0, f accounts for more than half


@dataclass(frozen=True)
class Decomposition:
    experiment: str
    quantity: str
    reading: str
    numerator: str          # framework over ...
    denominator: str        # ... framework
    posted: Span            # log R(as_posted)
    fixed: Span             # log R(fixed)
    gap: Span               # posted - fixed
    shares: tuple[Share, ...]           # largest |share| first
    interaction: Span | None            # None where a factor's single changes were not measured
    unmeasured: tuple[tuple[str, str], ...]     # (factor, why) for factors without both single changes
    method: str                         # REPEATS, EPOCHS (some configuration had one repeat) or NONE

    @property
    def complete(self) -> bool:
        return self.interaction is not None


class _Cells:
    """Per (variant the runs are stored under, framework): the point figure and its bootstrap draws."""

    def __init__(self, by_variant: ByVariant, quantity: str, reading: str) -> None:
        self.by_variant, self.quantity, self.reading = by_variant, quantity, reading
        self.rng = np.random.default_rng(SEED)
        self.found: dict[tuple[str, str], tuple[float, NDArray[np.float64] | None, str] | None] = {}

    def log(self, variant: str, fw: str) -> tuple[float, NDArray[np.float64] | None, str] | None:
        """log of the figure of ``fw`` in ``variant``, its log draws (None: no interval) and how they were drawn;
        None where no run stands for it."""
        stored = run_groups.stand_in(variant, fw, self.by_variant, lambda rs: rs[0]["spec"])
        if stored is None:
            return None
        key = (stored, fw)
        if key not in self.found:
            self.found[key] = self._draw(list(self.by_variant[stored][fw]))
        return self.found[key]

    def _draw(self, rs: list[dict[str, Any]]) -> tuple[float, NDArray[np.float64] | None, str] | None:
        got = metrics.collect(rs, self.quantity, self.reading)
        values = np.asarray(got.values, dtype=np.float64)
        if not len(values) or (values <= 0).any():
            return None
        point = math.log(float(np.median(values)))
        if len(values) > 1:
            picks = values[self.rng.integers(0, len(values), (RESAMPLES, len(values)))]
            return point, np.log(np.median(picks, axis=1)), REPEATS
        epochs = self._epochs(rs[0])
        if epochs is None:
            return point, None, NONE
        picks = epochs[self.rng.integers(0, len(epochs), (RESAMPLES, len(epochs)))]
        per = picks.mean(axis=1) * (len(epochs) if self.quantity in SUMMED else 1)
        return point, np.log(per), EPOCHS

    def _epochs(self, r: dict[str, Any]) -> NDArray[np.float64] | None:
        parts = PER_EPOCH.get(self.quantity)
        try:
            epochs = metrics.field(r, "timing.epochs") if parts else []
        except NotMeasured:
            return None
        values = np.asarray([sum(e[p] for p in parts or ()) for e in epochs], dtype=np.float64)
        return values if len(values) > 1 and (values > 0).all() else None


def _span(point: float, draws: NDArray[np.float64] | None) -> Span:
    if draws is None:
        return Span(point)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return Span(point, float(low), float(high))


Figure = tuple[float, NDArray[np.float64] | None]


def _minus(a: Figure, b: Figure) -> Figure:
    return a[0] - b[0], (a[1] - b[1]) if a[1] is not None and b[1] is not None else None


def _mean(a: Figure, b: Figure) -> Figure:
    return (a[0] + b[0]) / 2, (a[1] + b[1]) / 2 if a[1] is not None and b[1] is not None else None


def factors(by_variant: ByVariant, frameworks: tuple[str, ...]) -> list[str]:
    """as_posted's factors in these frameworks: each one's pitfalls as its runs record them, then NUMERICS where
    as_posted's numerics are not fixed's."""
    out: list[str] = []
    numerics = False
    for fw in frameworks:
        posted, fixed = (run_groups.runs_of(by_variant, v, fw) for v in (POSTED, FIXED))
        if posted:
            out += [p for p in posted[0]["spec"].get("pitfalls", []) if p not in out]
            numerics |= bool(fixed) and posted[0]["spec"].get("numerics") != fixed[0]["spec"].get("numerics")
    return out + ([NUMERICS] if numerics else [])


def decompose(by_variant: ByVariant, experiment: str, quantity: str, reading: str, numerator: str,
              denominator: str) -> Decomposition | None:
    """The gap of numerator / denominator from as_posted to fixed, per factor; None where either end is not measured."""
    cells = _Cells(by_variant, quantity, reading)
    methods: set[str] = set()

    def ratio(variant: str) -> Figure | None:
        a, b = cells.log(variant, numerator), cells.log(variant, denominator)
        if a is None or b is None:
            return None
        methods.update((a[2], b[2]))
        return _minus((a[0], a[1]), (b[0], b[1]))

    posted, fixed = ratio(POSTED), ratio(FIXED)
    if posted is None or fixed is None:
        return None
    gap = _minus(posted, fixed)
    shares: list[tuple[Share, Figure]] = []
    unmeasured: list[tuple[str, str]] = []
    for factor in factors(by_variant, (numerator, denominator)):
        plus, minus = ratio(ADDED + factor), ratio(REMOVED + factor)
        if plus is None or minus is None:
            missing = [v for v, got in ((ADDED + factor, plus), (REMOVED + factor, minus)) if got is None]
            unmeasured.append((factor, f"no measured run of {' or '.join(missing)} (run with --ablation)"))
            continue
        added, removed = _minus(plus, fixed), _minus(posted, minus)
        share = _mean(added, removed)
        beyond = _minus(share, (gap[0] / 2, gap[1] / 2 if gap[1] is not None else None))
        if gap[0] < 0:
            beyond = (-beyond[0], -beyond[1] if beyond[1] is not None else None)
        shares.append((Share(factor, _span(*added), _span(*removed), _span(*share), _span(*_minus(removed, added)),
                             _span(*beyond)), share))
    interaction: Span | None = None
    if not unmeasured:
        rest = gap
        for _, share in shares:
            rest = _minus(rest, share)
        interaction = _span(*rest)
    method = NONE if NONE in methods else EPOCHS if EPOCHS in methods else REPEATS
    ordered = tuple(s for s, _ in sorted(shares, key=lambda got: -abs(got[0].share.value)))
    return Decomposition(experiment, quantity, reading, numerator, denominator, _span(*posted), _span(*fixed),
                         _span(*gap), ordered, interaction, tuple(unmeasured), method)


def explaining(d: Decomposition) -> Share | None:
    """The one factor that explains the gap, where the measured shares say so (``RULE``); None otherwise."""
    if not d.complete or not d.shares or d.gap.low is None or d.gap.high is None or d.gap.holds(0.0):
        return None
    assert d.interaction is not None
    top = d.shares[0]
    low = top.beyond_half.low
    return top if d.interaction.holds(0.0) and low is not None and low > 0 else None


RULE = ("A verdict reads \"explained by\" a factor only where the gap's interval excludes 1x, that factor's share "
        "exceeds half the gap over its whole interval (share minus half the gap, bootstrapped together, above 0) "
        "and the interaction's interval holds 1x; with no interval (single repeats of a figure that has no "
        "epochs to resample) it never does.")

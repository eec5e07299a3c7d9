"""--repeats auto: repeats that stop once every ratio a claim reads is clear of the claim's band.

The rule, fixed before the first run: each configuration runs ``MIN_REPEATS`` times. After each round
every claim judged by a ratio (``ratio``, ``effect_disappears_with_fix``) is looked at. The interval of
each of its ratios is the Welch t-interval of the difference of the two sides' mean log figures, that
is of the ratio of their geometric means, at level 1 - ALPHA / (looks x ratios), where looks is the most
the rule can take (cap - MIN_REPEATS + 1). By Bonferroni, the chance that any look's interval of any of
the claim's ratios misses its true ratio is at most ALPHA (under log-normal repeats), so a claim is
decided wrongly with probability at most ALPHA, whichever look it stops at. An unadjusted 95% interval
at each look would not keep that rate: tests/test_sequential.py measures both by simulation.

A ratio is decided when its interval lies wholly inside the values that reproduce its part of the claim,
or wholly outside them; a claim is decided when each ratio is, or when one is decided outside (the
verdict then cannot be "reproduced"). The configurations of an undecided claim get one more repeat,
until the cap. A claim whose verdict is not measured or not comparable is not looked at: more repeats
cannot change that. Value claims (one framework's absolute figure) are never ratios, and do not drive
repeats. The report replays the same rule from the result files (``stops``), so it says per claim how
many repeats it needed and why it stopped.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reprokit.claims import verdicts
from reprokit.claims.claims import Claim, Operand
from reprokit.errors import UserError
from reprokit.results import stats
from reprokit.results.metrics import NotMeasured

MIN_REPEATS = 3
DEFAULT_CAP = 4                # the seeds' GPU default within 1 GPU-hour by its H100 estimate (a cap of 5: 1.04)
ALPHA = 0.05
FILE = "repeats.json"          # the rule a report's runs were repeated by, beside its result files
_T = stats.optional("scipy.stats")


@dataclass(frozen=True)
class Rule:
    cap: int = DEFAULT_CAP

    def __post_init__(self) -> None:
        if self.cap < MIN_REPEATS:
            raise UserError(f"--repeats-cap {self.cap} is below the {MIN_REPEATS} repeats --repeats auto always "
                            f"runs; give a cap of at least {MIN_REPEATS}")

    @property
    def looks(self) -> int:
        return self.cap - MIN_REPEATS + 1

    def level(self, ratios: int) -> float:
        return 1.0 - ALPHA / (self.looks * ratios)

    def to_dict(self) -> dict[str, Any]:
        return {"rule": "auto", "min": MIN_REPEATS, "cap": self.cap, "alpha": ALPHA}


def read(path: Path) -> Rule | None:
    """The rule a report's repeats followed, from its file; None where they were a fixed number."""
    if not path.is_file():
        return None
    return Rule(int(json.loads(path.read_text())["cap"]))


def needs_scipy() -> str | None:
    """Why this host cannot apply the rule, or None."""
    return None if _T is not None else "its interval needs scipy's t distribution and scipy is not installed here"


def interval(a: Iterable[float], b: Iterable[float], level: float) -> tuple[float, float]:
    """The Welch t-interval of geometric-mean(a) / geometric-mean(b) at ``level`` (two-sided)."""
    assert _T is not None, needs_scipy()
    la, lb = np.log(np.asarray(list(a), dtype=np.float64)), np.log(np.asarray(list(b), dtype=np.float64))
    va, vb = la.var(ddof=1) / la.size, lb.var(ddof=1) / lb.size
    centre = float(la.mean() - lb.mean())
    if va + vb == 0:                        # identical repeats on both sides (a memory peak): no spread to allow
        return math.exp(centre), math.exp(centre)
    df = (va + vb) ** 2 / (va ** 2 / (la.size - 1) + vb ** 2 / (lb.size - 1))
    half = float(_T.t.ppf(0.5 + level / 2, df)) * math.sqrt(va + vb)
    return math.exp(centre - half), math.exp(centre + half)


@dataclass(frozen=True)
class Part:
    """One ratio a claim reads, and the values of it that reproduce that part of the claim."""
    name: str
    numerator: Operand
    denominator: Operand
    accept: tuple[float, float]


def parts(claim: Claim) -> list[Part]:
    """The ratios the claim's verdict reads; [] for a claim not judged by a ratio."""
    if claim.kind not in ("ratio", "effect_disappears_with_fix"):
        return []
    lo, hi, _ = verdicts.band(claim)
    num, den = claim.operands["numerator"], claim.operands["denominator"]
    if claim.kind == "ratio":
        if claim.direction == "greater":
            lo = max(lo, 1.0)
        elif claim.direction == "less":
            hi = min(hi, 1.0)
        return [Part(num.variant, num, den, (lo, hi))]
    fixed = claim.fixed_variant or "fixed"
    posted = (hi, math.inf) if claim.direction == "greater" else (0.0, lo)
    return [Part(num.variant, num, den, posted),
            Part(fixed, Operand(num.quantity, num.framework, fixed, num.reading),
                 Operand(den.quantity, den.framework, fixed, den.reading), (lo, hi))]


@dataclass(frozen=True)
class Look:
    repeats: int                    # the fewest repeats of a side at this look
    decided: bool
    why: str
    run_ids: tuple[str, ...]        # the runs it read


def side(low: float, high: float, accept: tuple[float, float]) -> str | None:
    """Where an interval lies against the values that reproduce: "inside", "outside", or None (across an edge)."""
    lo, hi = accept
    if lo <= low and high <= hi:
        return "inside"
    if high < lo or low > hi:
        return "outside"
    return None


def _shown(accept: tuple[float, float]) -> str:
    lo, hi = accept
    return f"≥ {lo:.3g}" if math.isinf(hi) else f"≤ {hi:.3g}" if lo <= 0 else f"{lo:.3g}–{hi:.3g}"


def look(claim: Claim, results: list[dict[str, Any]], context: tuple[str, str], repeats: int, rule: Rule) -> Look:
    """The claim at the look that uses each configuration's first ``repeats`` repeats."""
    first = [r for r in results if r.get("repeat", 0) < repeats]
    found = parts(claim)
    level = rule.level(len(found))
    said, sides, ids, fewest = [], [], [], repeats
    for part in found:
        num = verdicts.measure(first, claim.experiment, part.numerator, context)
        den = verdicts.measure(first, claim.experiment, part.denominator, context)
        fewest = min(fewest, len(num.values), len(den.values))
        low, high = interval(num.values, den.values, level)
        where = side(low, high, part.accept)
        sides.append(where)
        ids += [*num.run_ids, *den.run_ids]
        said.append(f"{part.name}: the {level:.2%} interval {low:.3g}–{high:.3g} lies {where or 'across an edge of'}"
                    f" the band {_shown(part.accept)}")
    decided = "outside" in sides or all(s is not None for s in sides)
    return Look(fewest, decided, "; ".join(said), tuple(ids))


@dataclass(frozen=True)
class Stop:
    claim: Claim
    repeats: int                    # how many it needed (decided) or had (undecided)
    decided: bool
    why: str
    run_ids: tuple[str, ...]
    capped: bool                    # undecided at the rule's cap


def _judged(claim: Claim, results: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The contexts where the claim has a verdict that more repeats could change."""
    if not parts(claim):
        return []
    return [c for c in verdicts.contexts(claim, results)
            if verdicts.evaluate_in(claim, results, c).status in (verdicts.REPRODUCED, verdicts.NOT_REPRODUCED)]


def stops(claims: list[Claim], results: list[dict[str, Any]], rule: Rule) -> list[Stop]:
    """Per ratio claim and context: the first look that decides it, else its last look, and why."""
    out = []
    for claim in claims:
        for context in _judged(claim, results):
            most = max(r.get("repeat", 0) for r in results if r["experiment"] == claim.experiment) + 1
            seen = None
            for n in range(MIN_REPEATS, min(most, rule.cap) + 1):
                try:
                    seen = look(claim, results, context, n, rule)
                except NotMeasured:
                    continue
                if seen.decided or seen.repeats < n:          # decided, or the runs of a side stop here
                    break
            if seen is not None:
                out.append(Stop(claim, seen.repeats, seen.decided, seen.why, seen.run_ids,
                                not seen.decided and seen.repeats >= rule.cap))
    return out


def more(claims: list[Claim], results: list[dict[str, Any]], rule: Rule) -> tuple[list[Stop], set[str]]:
    """The undecided claims below the cap, and the run ids whose configurations need one more repeat."""
    waiting = [s for s in stops(claims, results, rule) if not s.decided and s.repeats < rule.cap]
    return waiting, {i for s in waiting for i in s.run_ids}


def line(stop: Stop, rule: Rule) -> str:
    """Per claim, for the report: how many repeats, and why the rule stopped there."""
    if stop.decided:
        return f"decided after {stop.repeats} repeats: {stop.why}"
    if stop.capped:
        return f"undecided at the cap of {rule.cap} repeats: {stop.why}"
    return f"undecided after {stop.repeats} repeats (the runs stopped short of the cap): {stop.why}"

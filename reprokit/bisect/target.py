"""What a bisect measures and where it cuts: one framework's quantity over another's, against a threshold.

By default both come from the experiment's claims: the claim that a gap disappears with the fix (its
similar band's edge on the published side), else a framework-against-framework ratio claim with a
direction or a one-sided tolerance (the edge that reproducing it must pass). --quantity and --threshold
override; the frameworks are the claim's, or the reference over the experiment's next registered framework.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from reprokit.claims.claims import Claim, reference
from reprokit.errors import UserError
from reprokit.kits.contract.names import FRAMEWORKS, label
from reprokit.plan.experiments import Experiment
from reprokit.results.metrics import QUANTITIES


@dataclass(frozen=True)
class Target:
    quantity: str
    reading: str
    numerator: str                   # framework
    denominator: str
    threshold: float
    why: str                         # where the threshold comes from

    def frameworks(self) -> tuple[str, str]:
        return self.numerator, self.denominator

    def ratio_name(self) -> str:
        return f"{label(self.numerator)} / {label(self.denominator)} {QUANTITIES[self.quantity].short}"


def _edge(claim: Claim) -> tuple[float, str] | None:
    """The one threshold a claim's tolerance sets for its ratio, and how to say it; None where it sets two."""
    bounds = claim.bounds()
    if bounds is None:
        around = reference(claim)
        if around is None:
            return None
        t = claim.tolerance
        bounds = ((around[0] * (1 - t["relative"]), around[1] * (1 + t["relative"])) if "relative" in t
                  else (around[0] - t["absolute"], around[1] + t["absolute"]))
    lo, hi = bounds
    if claim.kind == "effect_disappears_with_fix":           # the posted gap lies beyond the similar band
        if claim.direction == "less":
            return lo, "the lower edge of its similar band"
        return hi, "the upper edge of its similar band"
    if math.isinf(hi) or claim.direction == "greater":
        return lo, "the least ratio that reproduces it"
    if math.isinf(lo) or claim.direction == "less":
        return hi, "the most ratio that reproduces it"
    return None


def _between_frameworks(claim: Claim) -> bool:
    num, den = claim.operands.get("numerator"), claim.operands.get("denominator")
    return (num is not None and den is not None and num.framework != den.framework
            and num.quantity == den.quantity and num.reading == den.reading)


def choose(exp: Experiment, claims: list[Claim] | None, claim_id: str | None, quantity: str | None,
           threshold: float | None) -> Target:
    """The bisect's target, refused in one sentence where nothing names it."""
    mine = [c for c in claims or [] if c.experiment == exp.name and _between_frameworks(c)]
    if claim_id is not None:
        picked = [c for c in mine if c.id == claim_id]
        if not picked:
            raise UserError(f"--claim {claim_id}: no framework-against-framework ratio claim of that id about "
                            f"{exp.name}; those it has: {', '.join(c.id for c in mine) or 'none'}")
        mine = picked
    ranked = sorted(mine, key=lambda c: c.kind != "effect_disappears_with_fix")
    usable = [(c, e) for c in ranked if (e := _edge(c)) is not None]
    if quantity is not None and quantity not in QUANTITIES:
        raise UserError(f"--quantity {quantity}: not a quantity the kit measures; known: {', '.join(QUANTITIES)}")
    if usable and (quantity is None or quantity == usable[0][0].operands["numerator"].quantity):
        claim, (edge, how) = usable[0]
        num, den = claim.operands["numerator"], claim.operands["denominator"]
        if threshold is not None:
            return Target(num.quantity, num.reading, num.framework, den.framework, threshold, "--threshold")
        return Target(num.quantity, num.reading, num.framework, den.framework, edge,
                      f"claim {claim.id}: {how}, on its {num.reading} reading")
    if quantity is None or threshold is None:
        raise UserError(f"no claim about {exp.name} gives a ratio threshold to bisect against; give --quantity "
                        f"QUANTITY and --threshold RATIO (for example --quantity epoch_time_s --threshold 1.3)")
    order = [*(f for f in FRAMEWORKS if f in exp.frameworks)]     # the reference first, where it runs
    if len(order) < 2:
        raise UserError(f"{exp.name} runs one framework only; a bisect measures one framework over another")
    return Target(quantity, "reported", order[0], order[1], threshold, "--threshold")

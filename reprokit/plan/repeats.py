"""What --repeats auto may add to a plan, priced before the first run: the worst case, where every configuration a
ratio claim reads goes to the cap (reprokit/claims/sequential.py). The rounds themselves are a policy of the run
loop (reprokit/execute/policies.py)."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from reprokit.claims import sequential
from reprokit.claims.claims import Claim
from reprokit.kits.contract.spec import Spec
from reprokit.plan import plan as planning


def configuration(spec: Spec) -> str:
    """What a spec runs, whichever repeat: the id of its first repeat."""
    return planning.identified(dataclasses.replace(spec, repeat=0, run_id="")).run_id


def plan_line(specs: Sequence[Spec], claims: list[Claim] | None, rule: sequential.Rule | None) -> str | None:
    """The dry run's word on the repeats the rule may add."""
    if rule is None:
        return None
    return (f"repeats auto: {sequential.MIN_REPEATS} of each configuration, then one more at a time of those whose "
            f"claim's ratio is not yet decided, up to {rule.cap} (--repeats-cap); at most "
            f"{len(to_the_cap(specs, claims or [], rule))} more runs")


def to_the_cap(specs: Sequence[Spec], claims: list[Claim], rule: sequential.Rule) -> list[Spec]:
    """The runs the rule would add if every configuration a ratio claim reads went to the cap: the worst case."""
    read = {(c.experiment, op.framework, op.variant) for c in claims for p in sequential.parts(c)
            for op in (p.numerator, p.denominator)}
    first = {configuration(s): s for s in specs if (s.experiment, s.framework, s.variant) in read}
    return [planning.identified(dataclasses.replace(s, repeat=n, run_id="")) for s in first.values()
            for n in range(sequential.MIN_REPEATS, rule.cap)]

"""The rounds a matrix runs after its first: tuned, composed from what its settings alone showed
(reprokit/plan/tuning.py); then, with --repeats auto, one more repeat of each undecided claim's configurations per
round, until every claim is decided or its configurations reach the cap (reprokit/claims/sequential.py)."""
from __future__ import annotations

import dataclasses

from reprokit.claims import sequential
from reprokit.claims.claims import Claim
from reprokit.console import RunProgress
from reprokit.plan import plan as planning
from reprokit.plan import tuning
from reprokit.plan.matrix import Matrix
from reprokit.results.store import Store
from reprokit.runners.base import Spec


def _configuration(spec: Spec) -> str:
    """What a spec runs, whichever repeat: the id of its first repeat."""
    return planning.identified(dataclasses.replace(spec, repeat=0, run_id="")).run_id


def first(todo: list[Spec]) -> list[Spec]:
    """What the first round runs: everything but tuned, which waits for its settings alone."""
    return [s for s in todo if s.variant != tuning.TUNED]


def tuned(m: Matrix, store: Store) -> tuple[int, bool]:
    """Tuned composed from the finished runs of its settings alone, replacing the dry run's tuned in ``m.specs``,
    and run; (failed runs, interrupted)."""
    if not any(s.variant == tuning.TUNED for s in m.specs):
        return 0, False
    results = [r for s in m.specs if (r := store.get(s.run_id)) is not None]
    # Only where the plan has tuned: an experiment no claim reads it of has fixed runs and nothing to compose.
    planned = {s.experiment for s in m.specs if s.variant == tuning.TUNED}
    composed = tuning.compose([s for s in m.specs if s.experiment in planned], results)
    m.specs = [s for s in m.specs if s.variant != tuning.TUNED] + list(composed)
    for line in tuning.choices_said([s for s in m.specs if s.experiment in planned], results):
        print(f"tuned: {line}", flush=True)
    todo = [s for s in composed if not ((r := store.get(s.run_id)) and r["status"] == "ok")]

    def progress_for(i: int, spec: Spec) -> RunProgress:
        return RunProgress(f"[tuned run {i + 1}/{len(todo)}] {spec.experiment} / {spec.framework} r{spec.repeat}")

    return m.executor.run(m.runner, todo, store, progress_for) if todo else (0, False)


def plan_line(m: Matrix) -> str | None:
    """The dry run's word on the repeats the rule may add."""
    if m.rule is None:
        return None
    return (f"repeats auto: {sequential.MIN_REPEATS} of each configuration, then one more at a time of those whose "
            f"claim's ratio is not yet decided, up to {m.rule.cap} (--repeats-cap); at most "
            f"{len(to_the_cap(m.specs, m.claims or [], m.rule))} more runs")


def to_the_cap(specs: list[Spec], claims: list[Claim], rule: sequential.Rule) -> list[Spec]:
    """The runs the rule would add if every configuration a ratio claim reads went to the cap: the worst case."""
    read = {(c.experiment, op.framework, op.variant) for c in claims for p in sequential.parts(c)
            for op in (p.numerator, p.denominator)}
    first = {_configuration(s): s for s in specs if (s.experiment, s.framework, s.variant) in read}
    return [planning.identified(dataclasses.replace(s, repeat=n, run_id="")) for s in first.values()
            for n in range(sequential.MIN_REPEATS, rule.cap)]


def run_until_decided(m: Matrix, store: Store) -> tuple[int, bool]:
    """Rounds of one more repeat while a claim is undecided below the cap; (failed runs, interrupted). The new
    specs join ``m.specs``, so the report holds their results."""
    assert m.rule is not None
    failures = 0
    while True:
        results = [r for s in m.specs if (r := store.get(s.run_id)) is not None]
        waiting, read = sequential.more(m.claims or [], results, m.rule)
        latest: dict[str, Spec] = {}
        for s in m.specs:
            key = _configuration(s)
            if key not in latest or s.repeat > latest[key].repeat:
                latest[key] = s
        wanted = {_configuration(s) for s in m.specs if s.run_id in read}
        extra = [planning.identified(dataclasses.replace(latest[k], repeat=latest[k].repeat + 1, run_id=""))
                 for k in sorted(wanted) if latest[k].repeat + 1 < m.rule.cap]
        if not waiting or not extra:
            return failures, False
        print(f"repeats auto: {len(waiting)} claim(s) undecided ({', '.join(sorted({w.claim.id for w in waiting}))})"
              f"; one more repeat of {len(extra)} configuration(s)", flush=True)
        m.specs += extra
        todo = [s for s in extra if not ((r := store.get(s.run_id)) and r["status"] == "ok")]

        def progress_for(i: int, spec: Spec, n: int = len(todo)) -> RunProgress:
            return RunProgress(f"[repeat run {i + 1}/{n}] {spec.experiment} / {spec.framework} / "
                               f"{spec.variant} r{spec.repeat}")

        failed, interrupted = m.executor.run(m.runner, todo, store, progress_for) if todo else (0, False)
        failures += failed
        if interrupted:
            return failures, True

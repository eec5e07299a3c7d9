"""The run loop's policies (reprokit/execute/loop.py): what runs next, decided from the results so far.

The plain matrix runs once; tuned runs once its settings alone have, composed from what they showed
(reprokit/plan/tuning.py); with --repeats auto, one more repeat of each undecided claim's configurations per
round, until every claim is decided or its configurations reach the cap (reprokit/claims/sequential.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from reprokit.claims import sequential
from reprokit.claims.claims import Claim
from reprokit.console import RunProgress, run_label
from reprokit.execute.executors import ProgressFor
from reprokit.execute.loop import Batch, unfinished
from reprokit.kits.contract.spec import Spec
from reprokit.plan import plan as planning
from reprokit.plan import tuning
from reprokit.plan.repeats import configuration
from reprokit.results.store import Store


def first(todo: list[Spec]) -> list[Spec]:
    """What the first round runs: everything but tuned, which waits for its settings alone."""
    return [s for s in todo if s.variant != tuning.TUNED]


@dataclass
class Once:
    """A given batch, run once: the plain matrix's first round (tuned aside), or one step of a bisect."""
    todo: list[Spec]
    progress_for: ProgressFor
    done: bool = False

    def next(self, specs: tuple[Spec, ...], store: Store) -> Batch | None:
        if self.done:
            return None
        self.done = True
        return Batch(specs, tuple(self.todo), self.progress_for)


@dataclass
class Tuned:
    """Tuned composed from the finished runs of its settings alone, in place of the dry run's tuned, and run."""
    done: bool = False

    def next(self, specs: tuple[Spec, ...], store: Store) -> Batch | None:
        if self.done or not any(s.variant == tuning.TUNED for s in specs):
            return None
        self.done = True
        results = [r for s in specs if (r := store.get(s.run_id)) is not None]
        # Only where the plan has tuned: an experiment no claim reads it of has fixed runs and nothing to compose.
        planned = {s.experiment for s in specs if s.variant == tuning.TUNED}
        composed = tuning.compose([s for s in specs if s.experiment in planned], results)
        held = tuple(s for s in specs if s.variant != tuning.TUNED) + tuple(composed)
        said = tuple(f"tuned: {line}" for line in tuning.choices_said([s for s in held if s.experiment in planned],
                                                                      results))
        todo = unfinished(composed, store)

        def progress_for(i: int, spec: Spec) -> RunProgress:
            return RunProgress(f"[tuned run {i + 1}/{len(todo)}] {run_label(spec)}")

        return Batch(held, todo, progress_for, said)


@dataclass
class UntilDecided:
    """Rounds of one more repeat while a claim is undecided below the cap; the new specs join the matrix, so the
    report holds their results."""
    claims: list[Claim]
    rule: sequential.Rule

    def next(self, specs: tuple[Spec, ...], store: Store) -> Batch | None:
        results = [r for s in specs if (r := store.get(s.run_id)) is not None]
        waiting, read = sequential.more(self.claims, results, self.rule)
        latest: dict[str, Spec] = {}
        for s in specs:
            key = configuration(s)
            if key not in latest or s.repeat > latest[key].repeat:
                latest[key] = s
        wanted = {configuration(s) for s in specs if s.run_id in read}
        extra = tuple(planning.identified(dataclasses.replace(latest[k], repeat=latest[k].repeat + 1, run_id=""))
                      for k in sorted(wanted) if latest[k].repeat + 1 < self.rule.cap)
        if not waiting or not extra:
            return None
        said = (f"repeats auto: {len(waiting)} claim(s) undecided ({', '.join(sorted({w.claim.id for w in waiting}))})"
                f"; one more repeat of {len(extra)} configuration(s)",)
        todo = unfinished(extra, store)

        def progress_for(i: int, spec: Spec, n: int = len(todo)) -> RunProgress:
            return RunProgress(f"[repeat run {i + 1}/{n}] {run_label(spec)}")

        return Batch(specs + extra, todo, progress_for, said)

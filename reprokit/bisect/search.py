"""`reprokit bisect A B`: delta debugging over the declared settings in which A and B differ.

Each step is a configuration (B with some of the differing settings flipped to A's), run for real
through the plan and the executor as `reprokit reproduce` runs its matrix, its results kept in the
state folder, so a configuration run before (here or by reproduce) is not run again. A step counts
only where the ratio's bracket over repeats lies wholly on one side of the threshold; otherwise it
gets more repeats, up to --max-repeats, and is then reported undecided.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from reprokit.bisect import settings as cfg
from reprokit.bisect.ddmin import Found, Outcome, OutOfBudget, ddmin, worst_case_tests
from reprokit.bisect.target import Target
from reprokit.console import RunProgress
from reprokit.errors import UserError
from reprokit.execute import compose, loop, policies, stopping
from reprokit.kits.contract.spec import Spec
from reprokit.plan import matrix
from reprokit.plan.experiments import Experiment
from reprokit.plan.request import Request
from reprokit.results import metrics, stats
from reprokit.results.store import Store

DEFAULT_BUDGET = 100
DEFAULT_REPEATS = 3


class Stopped(Exception):
    """Ctrl-C or a stop from outside during a step's runs: the finished ones are kept."""


@dataclass(frozen=True)
class Limits:
    budget: int = DEFAULT_BUDGET          # runs this command may start
    repeats: int = DEFAULT_REPEATS        # a step's first repeats per framework
    max_repeats: int = 2 * DEFAULT_REPEATS    # an undecided step's repeats go up to this


@dataclass(frozen=True)
class Measurement:
    ratio: stats.Ratio
    side: str | None                      # "above" / "below" the threshold, or None: undecided
    repeats: int

    def text(self, threshold: float) -> str:
        verdict = (f"{self.side} {threshold:g}: decided" if self.side else
                   f"its bracket straddles {threshold:g}: undecided after {self.repeats} repeats")
        return f"{self.ratio.text()}, {verdict}"


def worst_case_runs(changes: list[str], frameworks: tuple[str, ...], limits: Limits) -> int:
    """The runs a bisect can start at most: both ends and every step ddmin may take, each at the most repeats,
    in each framework a change can alter (the others' runs are B's throughout)."""
    moved = cfg.touched(changes, frameworks)
    steps = 2 + worst_case_tests(len(changes))
    return (steps * len(moved) + len(frameworks) - len(moved)) * limits.max_repeats


def refuse_over_budget(changes: list[str], frameworks: tuple[str, ...], limits: Limits) -> int:
    need = worst_case_runs(changes, frameworks, limits)
    if need > limits.budget:
        raise UserError(f"this bisect of {len(changes)} differing settings may need up to {need} runs "
                        f"(at most {limits.max_repeats} repeats a step), more than its budget of {limits.budget}; "
                        f"give --budget {need} (or fewer --max-repeats)")
    return need


@dataclass
class Bisect:
    request: Request                      # profile and sizes fixed; the plan's switches for each step
    built: compose.Matrix                  # the runner and the executor, planned once
    experiment: Experiment
    a: cfg.Side
    b: cfg.Side
    changes: list[str]
    target: Target
    limits: Limits
    store: Store
    started: int = 0                      # runs this command started
    reused: int = 0                       # runs a step found finished
    steps: int = 0

    def _specs(self, flipped: Sequence[str], repeats: int) -> list[Spec]:
        """The specs of one configuration in both frameworks of the ratio, planned as reproduce plans a variant."""
        profile, device = self.built.profile, self.built.device
        config = cfg.configuration(list(flipped), self.a, self.b, self.experiment.resolved(profile)["numerics"])
        out: list[Spec] = []
        for framework in self.target.frameworks():
            name, exp = cfg.variant_for(self.experiment, config, framework, profile, (self.a.variant, self.b.variant))
            what = dataclasses.replace(self.request.what, variants=(name,), frameworks=(framework,),
                                       repeats=repeats, claims="none", ablation=False)
            specs, _ = matrix.planned(dataclasses.replace(self.request, what=what), {exp.name: exp}, profile,
                                      device, self.built.runner.describe, self.built.data)
            out += specs
        return out

    def _run(self, specs: list[Spec], label: str) -> None:
        todo = [s for s in specs if not ((r := self.store.get(s.run_id)) and r["status"] == "ok")]
        self.reused += len(specs) - len(todo)
        if not todo:
            return
        if self.started + len(todo) > self.limits.budget:
            raise OutOfBudget
        self.started += len(todo)

        def progress(i: int, spec: Spec) -> RunProgress:
            return RunProgress(f"  [{label} run {i + 1}/{len(todo)}] {spec.framework} / {spec.variant} r{spec.repeat}")

        ran = loop.run(self.built.executor, self.built.runner, self.store, todo, [policies.Once(todo, progress)])
        if ran.interrupted:
            raise Stopped

    def measure(self, flipped: Sequence[str], label: str) -> Measurement:
        """The ratio of one configuration, with more repeats while it is undecided and the limit allows."""
        repeats = self.limits.repeats
        while True:
            specs = self._specs(flipped, repeats)
            self._run(specs, label)
            values: dict[str, list[float]] = {f: [] for f in self.target.frameworks()}
            for s in specs:
                result = self.store.get(s.run_id)
                if result is None or result["status"] != "ok":
                    status = result["status"] if result else "no result"
                    raise UserError(f"the run {s.run_id} ({s.framework} / {s.variant} r{s.repeat}) of this bisect "
                                    f"ended {status}, so its step cannot be measured; see "
                                    f"{self.store.path(s.run_id)} and run the same command again once it is fixed")
                got = metrics.collect([result], self.target.quantity, self.target.reading)
                if not got.values:
                    raise UserError(f"the run {s.run_id} has no {self.target.quantity} ({got.missing[0]}); "
                                    f"choose a quantity this profile measures with --quantity")
                values[s.framework] += got.values
            ratio = stats.ratio(values[self.target.numerator], values[self.target.denominator])
            side = None
            if ratio.low is not None and ratio.high is not None:
                side = ("above" if ratio.low > self.target.threshold else
                        "below" if ratio.high < self.target.threshold else None)
            if side or repeats >= self.limits.max_repeats:
                return Measurement(ratio, side, repeats)
            repeats = min(repeats + self.limits.repeats, self.limits.max_repeats)

    def step(self, flipped: Sequence[str], what: str) -> Measurement:
        self.steps += 1
        label = f"step {self.steps}"
        got = self.measure(flipped, label)
        shown = ", ".join(flipped) if flipped else "none"
        print(f"{label}: {what}flipped {len(flipped)} of {len(self.changes)}: {shown}\n"
              f"        {self.target.ratio_name()} {got.text(self.target.threshold)}", flush=True)
        return got


def run(bisect: Bisect) -> int:
    """Both ends, then ddmin between them; prints each step and the set found. 0 where a 1-minimal set was
    found, 1 where none could be (an undecided or a same-side end, the budget spent)."""
    try:
        base = bisect.step((), f"B ({bisect.b.name}), ")
        full = bisect.step(tuple(bisect.changes), f"A ({bisect.a.name}), ")
        if base.side is None or full.side is None or base.side == full.side:
            print(_no_search(bisect, base, full))
            return _summary(bisect, 1)
        moves = full.side

        def test(subset: tuple[str, ...]) -> Outcome:
            side = bisect.step(subset, "").side
            return Outcome.UNDECIDED if side is None else Outcome.MOVES if side == moves else Outcome.STAYS

        found = ddmin(bisect.changes, test)
    except OutOfBudget:
        print(f"result: the budget of {bisect.limits.budget} runs is spent before both ends are measured")
        return _summary(bisect, 1)
    except Stopped:
        print("\n" + stopping.resume_line(f" in {bisect.store.root}"))
        return stopping.STOPPED
    print(_found(bisect, found, moves))
    return _summary(bisect, 0 if found.one_minimal else 1)


def _no_search(bisect: Bisect, base: Measurement, full: Measurement) -> str:
    t = bisect.target.threshold
    if base.side is None or full.side is None:
        which = " and ".join(n for n, m in (("B", base), ("A", full)) if m.side is None)
        return (f"result: no search: {which} stays undecided against {t:g} after {bisect.limits.max_repeats} "
                f"repeats, so no step could be told to move; give more --max-repeats or a longer profile")
    return (f"result: no search: A and B both lie {full.side} {t:g}, so no set of their differences moves "
            f"{bisect.target.ratio_name()} across it")


def _found(bisect: Bisect, found: Found, moves: str) -> str:
    t = bisect.target.threshold
    shown = ", ".join(found.changes)
    if found.out_of_budget:
        return (f"result: the budget of {bisect.limits.budget} runs is spent; the smallest set found so far to "
                f"move the ratio {moves} {t:g} is {{{shown}}}, not shown to be 1-minimal")
    if found.one_minimal:
        return (f"result: 1-minimal set: {{{shown}}}: flipping it from B to A moves the ratio {moves} {t:g}, and "
                f"undoing any one of it does not")
    return (f"result: {{{shown}}} moves the ratio {moves} {t:g}, but undoing "
            f"{', '.join(found.undecided_removals)} was undecided, so it is not shown to be 1-minimal")


def _summary(bisect: Bisect, code: int) -> int:
    print(f"runs: {bisect.started} started of a budget of {bisect.limits.budget}, {bisect.reused} found finished in "
          f"{bisect.store.root}; {bisect.steps} steps")
    return code

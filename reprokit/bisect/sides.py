"""Everything a bisect decides before its first run, and refuses in one sentence: the experiment, the two
sides and their differing settings, what is measured against which threshold, and the budget."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from reprokit.bisect import settings as cfg
from reprokit.bisect import target as targets
from reprokit.bisect.search import Bisect, Limits, refuse_over_budget
from reprokit.claims import claims as claimlib
from reprokit.environments import host_checks
from reprokit.errors import UserError
from reprokit.execute import compose
from reprokit.plan.experiments import BUILTIN_DIR, Experiment, discover
from reprokit.plan.request import Request
from reprokit.results.store import Store


@dataclass(frozen=True)
class Prepared:
    request: Request                 # with the profile, step cap and frameworks the bisect runs at
    experiment: Experiment
    a: cfg.Side
    b: cfg.Side
    changes: list[str]
    target: targets.Target
    limits: Limits


def limits(budget: int, repeats: int, max_repeats: int | None) -> Limits:
    most = 2 * repeats if max_repeats is None else max_repeats
    if repeats < 2:
        raise UserError(f"--repeats must be at least 2, got {repeats}: a step's ratio needs a bracket over repeats "
                        f"on each side to be decided")
    if most < repeats:
        raise UserError(f"--max-repeats {most} is below --repeats {repeats}; give at least {repeats}")
    if budget < 1:
        raise UserError(f"--budget must be at least 1 run, got {budget}")
    return Limits(budget, repeats, most)


def _profile(req: Request, given: str | None) -> str:
    """The profile the runs use: asked for, else the result sets', else the hardware's (as reproduce picks it)."""
    if req.what.profile or given:
        return req.what.profile or given or ""
    gpus = req.where.gpus or ("all" if host_checks.host_has_gpu() else "none")
    return "quick" if gpus == "none" else "standard"


def prepare(req: Request, a_given: str, b_given: str, experiment: str | None, claims: str, claim_id: str | None,
            quantity: str | None, threshold: float | None, limits: Limits) -> Prepared:
    known = discover([BUILTIN_DIR, *req.what.experiment_dirs])
    origin = cfg.Origin()
    if experiment is not None:
        if experiment not in known:
            raise UserError(f"--experiment: no experiment named {experiment}; known: {', '.join(sorted(known))}")
        exp = known[experiment]
        profile = _profile(req, None)
        a, b = cfg.from_variant(exp, a_given, profile), cfg.from_variant(exp, b_given, profile)
    else:
        (name_a, a, origin), (name_b, b, origin_b) = cfg.from_results(a_given), cfg.from_results(b_given)
        if (name_a, origin) != (name_b, origin_b):
            raise UserError(f"{a_given} ({name_a}, {origin.profile} profile, step cap {origin.max_steps}) and "
                            f"{b_given} ({name_b}, {origin_b.profile}, {origin_b.max_steps}) are not runs of one "
                            f"experiment at one size; give two result sets of the same experiment and profile")
        if name_a not in known:
            raise UserError(f"the result sets are of the experiment {name_a}, which is not among those known here; "
                            f"give its folder with --experiments DIR")
        exp = known[name_a]
        profile = _profile(req, origin.profile)
    changes = cfg.differences(a, b)
    if not changes:
        raise UserError(f"{a.name} and {b.name} differ in no declared setting (pitfalls, numerics), so there is "
                        f"nothing to bisect; give two sides that differ, such as as_posted and fixed")
    loaded = None if claims == "none" else claimlib.load(claims)
    target = targets.choose(exp, loaded, claim_id, quantity, threshold)
    frameworks = (target.numerator, target.denominator)
    if missing := [f for f in frameworks if f not in exp.frameworks]:
        raise UserError(f"{exp.name} does not run {', '.join(missing)}, which the ratio needs")
    refuse_over_budget(changes, frameworks, limits)
    max_steps = req.what.max_steps
    if max_steps is None and origin.max_steps != exp.resolved(profile)["train"].get("max_steps_per_epoch"):
        max_steps = origin.max_steps          # the result sets ran with --max-steps
    what = dataclasses.replace(req.what, only=(exp.name,), profile=profile, max_steps=max_steps,
                               frameworks=frameworks, variants=("fixed",), claims="none", repeats=limits.repeats)
    return Prepared(dataclasses.replace(req, what=what), exp, a, b, changes, target, limits)


def start(p: Prepared) -> Bisect:
    """The runner and the executor, as reproduce builds them; prints what will be bisected."""
    built = compose.build(p.request)
    built.executor.prepare(built.runner, set(p.target.frameworks()))
    t = p.target
    print(f"bisect: {p.experiment.name}, A = {p.a.name}, B = {p.b.name}; {built.profile} profile on {built.device}, "
          f"backend {built.runner.name} ({built.why})")
    print(f"differences ({len(p.changes)}), each flipped from B's value to A's:")
    for change in p.changes:
        print(f"  {cfg.describe(change, p.a, p.b)}")
    print(f"measured: {t.ratio_name()} ({t.quantity}, {t.reading} reading), threshold {t.threshold:g} ({t.why})")
    print(f"budget: {p.limits.budget} runs; worst case {refuse_over_budget(p.changes, t.frameworks(), p.limits)}; "
          f"a step is decided when its bracket lies on one side of {t.threshold:g}, with {p.limits.repeats} "
          f"repeats, else up to {p.limits.max_repeats}\n", flush=True)
    return Bisect(p.request, built, p.experiment, p.a, p.b, p.changes, t, p.limits,
                  Store(p.request.how.state_dir / "results"))

"""What a `reprokit reproduce` command will run, decided before the first run and without asking the host: the
experiments, their specs and the claims that judge them. The composition root (reprokit/execute/compose.py)
gives the runner's facts and the data step's port. Every refusal of bad input (an unknown framework,
experiment or claim file, a claim about no experiment that runs) happens here, in one sentence."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from reprokit.claims import claims as claimlib
from reprokit.claims import sequential
from reprokit.errors import UserError
from reprokit.kits.contract.spec import Spec
from reprokit.plan import claimed, frameworks, script_plan, tuning
from reprokit.plan import plan as planning
from reprokit.plan.experiments import BUILTIN_DIR, Experiment, discover, from_scripts
from reprokit.plan.inputs import DataStep
from reprokit.plan.request import DEFAULT_CLAIMS, Request, What
from reprokit.results import runs
from reprokit.results.provenance import code


def repeats_rule(what: What, device: str, claims: list[claimlib.Claim] | None) -> sequential.Rule | None:
    """--repeats auto's rule where it was asked for, or by default on a GPU where claims judge the runs."""
    auto = what.auto_repeats
    if auto is None:
        auto = what.repeats is None and device == "gpu" and bool(claims) and sequential.needs_scipy() is None
    if not auto:
        return None
    if why := sequential.needs_scipy():
        raise UserError(f"--repeats auto: {why}; pip install scipy, or give --repeats N")
    if not claims:
        raise UserError("--repeats auto adds repeats until each claim's ratio is decided, and no claim is about "
                        "the experiments that run; give --repeats N")
    return sequential.Rule(what.repeats_cap or sequential.DEFAULT_CAP)


def selected(what: What, known: dict[str, Experiment]) -> dict[str, Experiment]:
    if not what.only:
        return known
    missing = set(what.only) - set(known)
    if missing:
        raise UserError(f"--only: no experiment named {', '.join(sorted(missing))}; known: {', '.join(sorted(known))}")
    return {k: v for k, v in known.items() if k in what.only}


def claims_of(what: What, experiments: dict[str, Experiment]) -> list[claimlib.Claim] | None:
    """The claims about the experiments that run; the default (seeds) quietly covers only those it has."""
    if what.claims == "none":
        return None
    loaded = [c for c in claimlib.load(what.claims) if c.experiment in experiments]
    if not loaded:
        if what.claims != DEFAULT_CLAIMS:
            raise UserError(f"--claims {what.claims}: none of its claims is about the experiments that run "
                            f"({', '.join(sorted(experiments))})")
        return None
    claimlib.check_against(loaded, experiments)
    return loaded


def options(what: What, profile: str, device: str, claims: list[claimlib.Claim] | None,
            experiments: dict[str, Experiment], data: DataStep) -> dict[str, planning.Options]:
    """Per experiment: the variants asked for, and the pitfalls to run alone (those the claims name)."""
    default = sequential.MIN_REPEATS if repeats_rule(what, device, claims) else 1 if profile == "quick" else 5
    # tuned is measured against fixed, so it brings fixed along
    variants = (*what.variants, "fixed") if planning.TUNED in what.variants and "fixed" not in what.variants \
        else what.variants
    base = planning.Options(profile=profile, device=device, repeats=what.repeats or default,
                            frameworks=(), data=data, dataset=what.dataset,
                            timeout_s=what.timeout_s, variants=variants, ablation=what.ablation,
                            max_steps=what.max_steps, devices=what.devices)
    out = {}
    for name, exp in experiments.items():
        alone = {v[1:] for c in claims or [] if c.experiment == name for v in c.variants()
                 if v.startswith("+") and not v.startswith(runs.TUNED_ALONE)}      # tuned plans its own
        out[name] = dataclasses.replace(base, alone=frozenset(alone),
                                        frameworks=frameworks.chosen(what.frameworks, exp))
    return out


def planned(request: Request, experiments: dict[str, Experiment], profile: str, device: str,
            describe: Callable[[str], dict[str, Any]], data: DataStep, mixed: str = tuning.DEFAULT_MIXED
            ) -> tuple[list[Spec], list[claimlib.Claim] | None]:
    """The specs a command plans for the experiments on a device, and the claims that judge them. It asks
    nothing of this host: ``describe(framework)`` gives the runner's facts (scripts/gpu_check prints the plan
    of a GPU it is not on), ``data`` the data step's port (reprokit/plan/inputs.py), ``mixed`` the mixed
    precision tuned gets (host_checks.mixed_precision). A script experiment's specs are its scripts'
    (reprokit/plan/script_plan.py). Each runs at each of its counts of devices: --devices, else its file's
    device_counts (reprokit/plan/plan.py ``counts``)."""
    what = request.what
    claims = claims_of(what, experiments)
    chosen = claimed.choose(what, experiments, claims, profile, device)
    per_experiment = options(what, profile, device, claims, {name: experiments[name] for name in chosen.kept}, data)
    for name, o in per_experiment.items():      # each kit experiment's counts, refused before any one's data step
        if not experiments[name].scripts:
            planning.global_batches(experiments[name], o)
    specs: list[Spec] = []
    last: list[Spec] = []           # tuned's runs, planned last: they wait for its settings alone (execute/policies.py)
    for name, o in per_experiment.items():
        exp = experiments[name]
        here = code(what.experiment_dirs)
        if exp.scripts:
            specs += script_plan.specs_for(name, exp.scripts, o, describe, here, epochs=what.epochs,
                                           differences=exp.doc.get("differences", []), require=what.requires,
                                           mounts=what.mounts, devices=planning.counts(exp, o),
                                           given={fw: str(c.path) for fw, c in what.scripts.items() if c.path})
            continue
        mine: list[Spec] = list(planning.specs_for(exp, o, describe, here))
        specs += mine
        if name in chosen.tuned:
            tuned = tuning.planned(mine, frozenset((c.experiment, op.framework, op.variant) for c in claims or []
                                                   for op in c.operands.values()), mixed)
            frameworks.check_specs(tuned, exp.path)         # what a kit cannot honour (JAX's limits), refused
            last += tuned
        # the posted scripts themselves, at one device: each was posted as a run on one
        for variant, scripts in exp.script_variants.items():
            if variant in o.variants:
                specs += script_plan.specs_for(name, scripts, o, describe, here, epochs=what.epochs,
                                               variant=variant, setting=exp.resolved(o.profile),
                                               differences=exp.doc.get("differences", []))
    # Repeat by repeat: each configuration's first repeat, then each one's second, so a slow spell of the host falls
    # on every configuration alike instead of on the one whose repeats it ran (pyperf and MLPerf interleave too).
    return (sorted(specs, key=lambda s: s.repeat) +
            sorted(last, key=lambda s: (s.variant == planning.TUNED, s.repeat))), claims


def known(what: What) -> dict[str, Experiment]:
    if what.scripts:                           # a quick look at two scripts: they are the only experiment
        name = re.sub(r"[^a-z0-9_]+", "_", (what.name or "scripts").lower()).strip("_") or "scripts"
        return {name: from_scripts(name, what.scripts)}
    return discover([BUILTIN_DIR, *what.experiment_dirs])


def on_gpu_elsewhere(request: Request, data: DataStep) -> tuple[list[Spec], str, sequential.Rule | None,
                                                                list[claimlib.Claim], str | None]:
    """(specs, profile, repeats rule, claims, what it leaves out) the command would plan on a GPU this host does not
    have, for a dry run's cost: it asks nothing of this host (``data`` looks up what is prepared), and the runner's
    facts (image, lock) are left out of the specs."""
    what = request.what
    if what.from_report:
        raise UserError("--gpu-model estimates the experiments a command plans; it cannot price --from REPORT, "
                        "whose runs have a device already: leave --from out")
    profile = what.profile or "standard"
    experiments = selected(what, known(what))
    specs, claims = planned(request, experiments, profile, "gpu", lambda framework: {}, data)
    specs, _ = planning.runnable_at_n(specs)
    left_out = claimed.choose(what, experiments, claims, profile, "gpu").line()
    return specs, profile, repeats_rule(what, "gpu", claims), claims or [], left_out

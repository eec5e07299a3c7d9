"""What a `reprokit reproduce` command will run, decided before the first run: the experiments, the
specs (planned, or a report's own with --from), the runner and why, the GPU slots, the claims.
Every refusal of bad input (an unknown framework, experiment or claim file, too many --parallel,
a cluster that cannot serve) happens here, in one sentence."""
from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kits.common.spec import RunSpec, ScriptSpec, SpecError
from reprokit.claims import claims as claimlib
from reprokit.claims import sequential
from reprokit.environments import datasets, host_checks, topology
from reprokit.environments.envs import ENVS
from reprokit.errors import UserError
from reprokit.execute.executors import Executor, HostExecutor, RayExecutor
from reprokit.plan import claimed, frameworks, script_plan, tuning
from reprokit.plan import plan as planning
from reprokit.plan.experiments import BUILTIN_DIR, Experiment, discover, from_scripts
from reprokit.plan.request import DEFAULT_CLAIMS, Request, What
from reprokit.results import runs, safe_names
from reprokit.results.provenance import REPO, code
from reprokit.results.store import Store, none_read
from reprokit.runners.base import Runner, Spec, typed
from reprokit.runners.choose import choose
from reprokit.runners.make import make


@dataclasses.dataclass
class Matrix:
    """Everything planned before the first run: what runs, where, and what judges it."""
    specs: list[Spec]
    runner: Runner
    executor: Executor
    why: str
    experiments: dict[str, Experiment]          # every experiment known, for the report's titles
    claims: list[claimlib.Claim] | None
    profile: str
    device: str
    gpu_name: str | None
    # framework -> the GPU build it runs, and why
    flavors: dict[str, host_checks.Flavor] = dataclasses.field(default_factory=dict)
    # what the frameworks asked for do not run, and why, one line each (no posted code in that framework)
    not_run: list[str] = dataclasses.field(default_factory=list)
    rule: sequential.Rule | None = None         # --repeats auto: repeats until each claim's ratio is decided
    left_out: str | None = None                 # what no claim in play reads, left out, and how to add it


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


def _claims(what: What, experiments: dict[str, Experiment]) -> list[claimlib.Claim] | None:
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


def _options(what: What, profile: str, device: str, claims: list[claimlib.Claim] | None,
             experiments: dict[str, Experiment], data_dir: Path, allow_download: bool,
             dry_run: bool) -> dict[str, planning.Options]:
    """Per experiment: the variants asked for, and the pitfalls to run alone (those the claims name)."""
    default = sequential.MIN_REPEATS if repeats_rule(what, device, claims) else 1 if profile == "quick" else 5
    # tuned is measured against fixed, so it brings fixed along
    variants = (*what.variants, "fixed") if planning.TUNED in what.variants and "fixed" not in what.variants \
        else what.variants
    base = planning.Options(profile=profile, device=device, repeats=what.repeats or default,
                            frameworks=(), data_dir=data_dir,
                            allow_download=allow_download and not dry_run, dataset=what.dataset,
                            timeout_s=what.timeout_s, variants=variants, ablation=what.ablation,
                            max_steps=what.max_steps, prepare_data=not dry_run)
    out = {}
    for name, exp in experiments.items():
        alone = {v[1:] for c in claims or [] if c.experiment == name for v in c.variants()
                 if v.startswith("+") and not v.startswith(runs.TUNED_ALONE)}      # tuned plans its own
        out[name] = dataclasses.replace(base, alone=frozenset(alone),
                                        frameworks=frameworks.chosen(what.frameworks, exp))
    return out


def specs_from(folder: Path, runner: Runner, device: str, data_dir: Path, code_info: dict[str, Any],
               offline: bool) -> list[Spec]:
    """A report's exact specs, to run again here: only the environment (runner, code) is this machine's."""
    results, refused = Store(folder / "results").evidence(f"--from {folder}")
    if not results and not refused:
        raise UserError(f"--from {folder}: no result files in {folder / 'results'}; name a report folder")
    if not results:
        raise UserError(f"--from {folder}: none of its result files can be read ({none_read(refused)}); name a "
                        f"report folder this kit wrote")
    specs: list[Spec] = []
    for r in results:
        try:
            spec = typed(copy.deepcopy(r["spec"]))     # refuses a spec the kits could not read
        except (SpecError, ValueError, TypeError) as exc:
            raise UserError(f"--from {folder}: {r['run_id']}.json has a spec this kit cannot run ({exc})") from None
        for field, name in (("experiment", spec.experiment), ("variant", spec.variant)):
            if why := safe_names.problem(name):
                raise UserError(f"--from {folder}: {r['run_id']}.json: its spec's {field} {why}; this kit "
                                f"names files after it, so it cannot run it")
        if spec.device == "gpu" and device != "gpu":
            raise UserError(f"--from {folder}: the report ran on a GPU and this machine runs on its CPU; "
                            f"re-run it on a machine with a GPU (or give --gpus)")
        if isinstance(spec, ScriptSpec) and not Path(spec.script.folder, spec.script.path).is_file():
            raise UserError(f"--from {folder}: its script {spec.script.path} is not in "
                            f"{spec.script.folder} here; put the scripts' folder there and re-run")
        d = spec.data
        seed = spec.train.seed if isinstance(spec, RunSpec) else 0
        wanted = {"dataset": d.dataset, "train_samples": d.train_samples, "test_samples": d.test_samples,
                  "seed": seed, **({"input_size": spec.data.input_size, "resize": spec.data.resize,
                                    "num_classes": spec.model.num_classes} if isinstance(spec, RunSpec) else {})}
        try:            # the spec's sizes and seed reach the data generator as a report gave them
            if any(n is not None and n < 1 for n in (d.train_samples, d.test_samples)):
                raise ValueError("a sample count below 1")
            here = datasets.prepare(wanted, data_dir, allow_download=not offline)
        except (ValueError, TypeError, OverflowError) as exc:
            raise UserError(f"--from {folder}: {r['run_id']}.json names data this kit cannot prepare ({exc}); "
                            f"it cannot run it") from None
        if here.sha256 != d.sha256 or here.file != d.file:
            raise UserError(f"--from {folder}: the {d.dataset} data prepared here (sha256 {here.sha256[:12]}) is "
                            f"not the data the report ran on ({(d.sha256 or '')[:12]}); prepare the same data and "
                            f"re-run")
        spec = dataclasses.replace(spec, provenance={**code_info, **runner.describe(spec.framework)})
        specs.append(planning.identified(spec))
    return specs


def _head_runner(runner_kind: str, device: str, data_dir: Path, extra: tuple[Path, ...]) -> tuple[Runner, str]:
    """(runner, why) on the head of a Ray cluster: it describes the runs, and under Docker builds the images."""
    if runner_kind == "local":
        return (make("local", data_dir=data_dir, device=device, extra_dirs=extra),
                "each node runs virtualenvs from the lock files")
    ok, why = host_checks.engine_status()
    if not ok:
        raise UserError(f"--ray-runner docker builds the images on this host first, but {why}.")
    flavor = "cuda" if device == "gpu" else "cpu"
    return (make("docker", data_dir=data_dir, device=device, extra_dirs=extra, flavor=flavor),
            "each node runs the pinned images in its own Docker engine")


def _slots(parallel: str, gpus: str, device: str) -> list[topology.Placement | None]:
    """One placement per run that may go at once; [None] for one run at a time with every assigned GPU."""
    if parallel != "auto" and not (parallel.isdigit() and int(parallel) >= 1):
        raise UserError(f"--parallel {parallel!r} is not understood; use auto or a number of runs at once, such as 4.")
    fake = topology.fake_slots()
    assigned = host_checks.resolve_gpus(gpus) if device == "gpu" and fake is None else []
    if parallel == "1":
        return [None]
    slots = fake if fake is not None else topology.gpu_slots(assigned)
    if not slots:
        if parallel == "auto":
            return [None]
        raise UserError(f"--parallel {parallel} runs one run per GPU, and no GPU is assigned (--gpus {gpus}); "
                        f"on a CPU host use --parallel 1.")
    n = len(slots) if parallel == "auto" else int(parallel)
    if n > len(slots):
        raise UserError(f"--parallel {n} is more than the {len(slots)} GPU(s) assigned (--gpus {gpus}); use "
                        f"--parallel {len(slots)} or less, or assign more GPUs.")
    placed: list[topology.Placement | None] = [*slots[:n]]
    return placed


def planned(request: Request, experiments: dict[str, Experiment], profile: str, device: str,
            describe: Callable[[str], dict[str, Any]], mixed: str = tuning.DEFAULT_MIXED
            ) -> tuple[list[Spec], list[claimlib.Claim] | None]:
    """The specs a command plans for the experiments on a device, and the claims that judge them. It asks
    nothing of this host: ``describe(framework)`` gives the runner's facts (scripts/gpu_check prints the plan
    of a GPU it is not on), ``mixed`` the mixed precision tuned gets (host_checks.mixed_precision). A script
    experiment's specs are its scripts' (reprokit/plan/script_plan.py)."""
    what, how = request.what, request.how
    claims = _claims(what, experiments)
    chosen = claimed.choose(what, experiments, claims, profile, device)
    per_experiment = _options(what, profile, device, claims, {name: experiments[name] for name in chosen.kept},
                              how.data_dir, not how.offline, how.dry_run)
    specs: list[Spec] = []
    last: list[Spec] = []           # tuned's runs, planned last: they wait for its settings alone (plan/rounds.py)
    for name, o in per_experiment.items():
        exp = experiments[name]
        here = code(what.experiment_dirs)
        if exp.scripts:
            specs += script_plan.specs_for(name, exp.scripts, o, describe, here, epochs=what.epochs,
                                           differences=exp.doc.get("differences", []), require=what.requires,
                                           mounts=what.mounts)
            continue
        mine: list[Spec] = list(planning.specs_for(exp, o, describe, here))
        specs += mine
        if name in chosen.tuned:
            tuned = tuning.planned(mine, frozenset((c.experiment, op.framework, op.variant) for c in claims or []
                                                   for op in c.operands.values()), mixed)
            frameworks.check_specs(tuned, exp.path)         # what a kit cannot honour (JAX's limits), refused
            last += tuned
        for variant, scripts in exp.script_variants.items():       # the posted scripts themselves
            if variant in o.variants:
                specs += script_plan.specs_for(name, scripts, o, describe, here, epochs=what.epochs,
                                               variant=variant, setting=exp.resolved(o.profile),
                                               differences=exp.doc.get("differences", []))
    # Repeat by repeat: each configuration's first repeat, then each one's second, so a slow spell of the host falls
    # on every configuration alike instead of on the one whose repeats it ran (pyperf and MLPerf interleave too).
    return (sorted(specs, key=lambda s: s.repeat) +
            sorted(last, key=lambda s: (s.variant == planning.TUNED, s.repeat))), claims


def _known(what: What) -> dict[str, Experiment]:
    if what.scripts:                           # a quick look at two scripts: they are the only experiment
        name = re.sub(r"[^a-z0-9_]+", "_", (what.name or "scripts").lower()).strip("_") or "scripts"
        return {name: from_scripts(name, what.scripts)}
    return discover([BUILTIN_DIR, *what.experiment_dirs])


def on_gpu_elsewhere(request: Request) -> tuple[list[Spec], str, sequential.Rule | None, list[claimlib.Claim],
                                                str | None]:
    """(specs, profile, repeats rule, claims, what it leaves out) the command would plan on a GPU this host does not
    have, for a dry run's cost: it asks nothing of this host, and the runner's facts (image, lock) are left out of
    the specs."""
    what = request.what
    if what.from_report:
        raise UserError("--gpu-model estimates the experiments a command plans; it cannot price --from REPORT, "
                        "whose runs have a device already: leave --from out")
    profile = what.profile or "standard"
    experiments = selected(what, _known(what))
    specs, claims = planned(request, experiments, profile, "gpu", lambda framework: {})
    left_out = claimed.choose(what, experiments, claims, profile, "gpu").line()
    return specs, profile, repeats_rule(what, "gpu", claims), claims or [], left_out


def build(request: Request) -> Matrix:
    """The matrix a `reprokit reproduce` command asks for, checked: bad input ends here, before any run."""
    what, where, how = request.what, request.where, request.how
    known = _known(what)
    experiments = selected(what, known)
    flavors: dict[str, host_checks.Flavor] = {}
    executor: Executor
    address = where.ray_address or ""          # the request has one wherever the executor is ray
    if where.executor == "ray":
        from reprokit.execute import cluster
        cluster.connect(address)
        gpus = where.gpus or ("all" if cluster.has_gpus() else "none")
    else:
        gpus = where.gpus or ("all" if host_checks.host_has_gpu() else "none")
    device = "cpu" if gpus == "none" else "gpu"
    profile = what.profile or ("standard" if device == "gpu" else "quick")
    needed = {f for e in experiments.values() for f in frameworks.chosen(what.frameworks, e)}
    if where.executor == "ray":
        runner, why = _head_runner(where.runner, device, how.data_dir, what.experiment_dirs)
        serving, at_once = cluster.check(where.runner, device, address)
        why += f"; {len(serving)} node(s) of the cluster at {address} can serve runs"
        executor = RayExecutor(address, serving, at_once, device, how.data_dir, what.experiment_dirs,
                               where.memory_limit)
        gpu_name = None
        mixed = tuning.DEFAULT_MIXED            # the nodes' GPUs are not known here: tuned's bf16 asks for 8.0
    else:
        slots = _slots(where.parallel, gpus, device)
        assigned = host_checks.resolve_gpus(gpus) if device == "gpu" else []
        # The driver decides each framework's GPU build, before the runner describes any run.
        flavors = host_checks.gpu_flavors(needed, gpus) if assigned and where.python is None else {}
        runner, why = choose(backend=where.runner, python=where.python, gpus=gpus,
                             gpus_explicit=where.gpus is not None, device=device, repo_root=REPO, envs_root=ENVS,
                             data_dir=how.data_dir, extra_dirs=what.experiment_dirs, frameworks=needed,
                             flavors=flavors, visible_gpus=",".join(g["uuid"] for g in assigned),
                             dry_run=how.dry_run, memory_limit=where.memory_limit)
        gpu_name = assigned[0]["name"] if assigned else None
        mixed = host_checks.mixed_precision(gpus) if assigned else tuning.DEFAULT_MIXED
        executor = HostExecutor(how.state_dir / "work", how.state_dir / "ledger", slots,
                                gpus=tuple(g["uuid"] for g in assigned))
        if slots != [None] and (first := slots[0]) is not None:      # several slots: each a placement
            why += f"; {len(slots)} runs at once, one per {'fake (test-only) ' if first.fake else ''}GPU slot"
    if what.from_report:
        specs = specs_from(what.from_report, runner, device, how.data_dir, code(what.experiment_dirs), how.offline)
        experiments = {k: v for k, v in known.items() if k in {s.experiment for s in specs}}
        profile = specs[0].profile
        claims = _claims(what, experiments)
        not_run: list[str] = []
        left_out = None
    else:
        specs, claims = planned(request, experiments, profile, device, runner.describe, mixed)
        chosen = claimed.choose(what, experiments, claims, profile, device)
        options = _options(what, profile, device, claims, {name: experiments[name] for name in chosen.kept},
                           how.data_dir, False, True)
        not_run = [line for name, o in options.items() for line in planning.not_run(experiments[name], o)]
        left_out = chosen.line()
    if device == "gpu":
        if any(s.variant == planning.TUNED for s in specs):
            host_checks.check_precision({"fp16_mixed"}, gpus, asked_by="--variants tuned (its mixed precision: "
                                        "bf16, or fp16 with loss scaling where a GPU has no bf16)",
                                        way_out="leave tuned out with --variants fixed,as_posted, or choose a "
                                                "newer GPU with --gpus")
        host_checks.check_precision({s.numerics.precision for s in specs if isinstance(s, RunSpec)}, gpus)
    rule = None if what.from_report else repeats_rule(what, device, claims)
    return Matrix(specs, runner, executor, why, known, claims, profile, device, gpu_name, flavors, not_run, rule,
                  left_out)

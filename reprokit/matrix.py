"""What a `reprokit reproduce` command will run, decided before the first run: the experiments, the
specs (planned, or a report's own with --from), the runner and why, the GPU slots, the claims.
Every refusal of bad input (an unknown framework, experiment or claim file, too many --parallel,
a cluster that cannot serve) happens here, in one sentence."""
from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

from kits.common.names import FRAMEWORKS
from kits.common.spec import RunSpec, ScriptSpec, SpecError
from reprokit import datasets, host_checks, script_plan, topology
from reprokit import plan as planning
from reprokit.envs import ENVS
from reprokit.errors import UserError
from reprokit.experiments import BUILTIN_DIR, discover, from_scripts
from reprokit.provenance import REPO, code
from reprokit.report import claims as claimlib
from reprokit.runners.choose import choose
from reprokit.store import Store

DEFAULT_VARIANTS = ("fixed", "as_posted")
DEFAULT_CLAIMS = "seeds"


@dataclasses.dataclass
class Matrix:
    """Everything planned before the first run: what runs, where, and what judges it."""
    specs: list[dict]
    runner: object
    why: str
    experiments: dict          # every experiment known, for the report's titles
    claims: list | None
    profile: str
    device: str
    gpu_name: str | None
    slots: list = dataclasses.field(default_factory=lambda: [None])   # one host: a placement per run at once
    serving: list[str] | None = None   # --backend ray: the nodes that can serve a run
    at_once: int = 1
    flavors: dict = dataclasses.field(default_factory=dict)   # framework -> the GPU build it runs, and why


def _frameworks(args) -> tuple[str, ...]:
    chosen = tuple(f.strip() for f in args.frameworks.split(",") if f.strip())
    unknown = set(chosen) - set(FRAMEWORKS)
    if unknown or not chosen:
        raise UserError(f"--frameworks: unknown {', '.join(sorted(unknown)) or '(empty)'}; "
                        f"allowed: {', '.join(FRAMEWORKS)}")
    return chosen


def selected(args, known: dict) -> dict:
    if not args.only:
        return known
    missing = set(args.only) - set(known)
    if missing:
        raise UserError(f"--only: no experiment named {', '.join(sorted(missing))}; known: {', '.join(sorted(known))}")
    return {k: v for k, v in known.items() if k in args.only}


def _claims(args, experiments: dict) -> list | None:
    """The claims about the experiments that run; the default (seeds) quietly covers only those it has."""
    if args.claims == "none":
        return None
    loaded = [c for c in claimlib.load(args.claims) if c.experiment in experiments]
    if not loaded:
        if args.claims != DEFAULT_CLAIMS:
            raise UserError(f"--claims {args.claims}: none of its claims is about the experiments that run "
                            f"({', '.join(sorted(experiments))})")
        return None
    claimlib.check_against(loaded, experiments)
    return loaded


def _options(args, profile: str, device: str, frameworks: tuple[str, ...], claims, experiments: dict,
             dry_run: bool) -> dict[str, planning.Options]:
    """Per experiment: the variants asked for, and the pitfalls to run alone (those the claims name)."""
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip()) if args.variants else DEFAULT_VARIANTS
    base = planning.Options(profile=profile, device=device, repeats=args.repeats or (1 if profile == "quick" else 5),
                            frameworks=frameworks, data_dir=args.data_dir.resolve(),
                            allow_download=not args.offline and not dry_run, dataset=args.dataset,
                            timeout_s=args.timeout, variants=variants, ablation=args.ablation,
                            max_steps=args.max_steps, prepare_data=not dry_run)
    out = {}
    for name in experiments:
        alone = {v[1:] for c in claims or [] if c.experiment == name for v in c.variants() if v.startswith("+")}
        out[name] = dataclasses.replace(base, alone=frozenset(alone))
    return out


def specs_from(folder: Path, runner, device: str, data_dir: Path, code_info: dict, offline: bool) -> list[dict]:
    """A report's exact specs, to run again here: only the environment (runner, code) is this machine's."""
    try:
        results = Store(folder / "results").all()
    except ValueError as exc:
        raise UserError(f"--from {folder}: {exc}") from None
    if not results:
        raise UserError(f"--from {folder}: no result files in {folder / 'results'}; name a report folder")
    specs = []
    for r in results:
        spec = copy.deepcopy(r["spec"])
        kind = ScriptSpec if spec.get("source") == "script" else RunSpec
        try:
            kind.from_dict(spec)
        except (SpecError, ValueError) as exc:
            raise UserError(f"--from {folder}: {r['run_id']}.json has a spec this kit cannot run ({exc})") from None
        if spec["device"] == "gpu" and device != "gpu":
            raise UserError(f"--from {folder}: the report ran on a GPU and this machine runs on its CPU; "
                            f"re-run it on a machine with a GPU (or give --gpus)")
        if kind is ScriptSpec and not Path(spec["script"]["folder"], spec["script"]["path"]).is_file():
            raise UserError(f"--from {folder}: its script {spec['script']['path']} is not in "
                            f"{spec['script']['folder']} here; put the scripts' folder there and re-run")
        d = spec["data"]
        seed = spec["train"]["seed"] if kind is RunSpec else 0
        here = datasets.prepare({"dataset": d["dataset"], "train_samples": d["train_samples"],
                                 "test_samples": d["test_samples"], "seed": seed},
                                data_dir, allow_download=not offline)
        if here.sha256 != d["sha256"]:
            raise UserError(f"--from {folder}: the {d['dataset']} data prepared here (sha256 {here.sha256[:12]}) is "
                            f"not the data the report ran on ({d['sha256'][:12]}); prepare the same data and re-run")
        spec["provenance"] = {**code_info, **runner.describe(spec["framework"])}
        spec = kind.from_dict(spec).to_dict()             # also refuses a spec the kits could not read
        spec["run_id"] = planning.run_id(spec)
        specs.append(spec)
    return specs


def _head_runner(args, device: str, data_dir: Path, extra: tuple[Path, ...]):
    """(runner, why) on the head of a Ray cluster: it describes the runs, and under Docker builds the images."""
    from reprokit.runners.local import LocalRunner
    if args.python is not None:
        raise UserError("--python names an interpreter on this host; with --backend ray each node uses its own "
                        "runner (--ray-runner docker or local), so leave --python out.")
    if args.ray_runner == "local":
        return LocalRunner(ENVS, data_dir, device, extra_paths=extra), "each node runs virtualenvs from the lock files"
    from reprokit.runners.docker import DockerRunner
    ok, why = host_checks.engine_status()
    if not ok:
        raise UserError(f"--ray-runner docker builds the images on this host first, but {why}.")
    runner = DockerRunner(REPO, data_dir, "none", [(d, f"/opt/reprokit/user/{i}") for i, d in enumerate(extra)],
                          flavor="cuda" if device == "gpu" else "cpu")
    return runner, "each node runs the pinned images in its own Docker engine"


def _slots(parallel: str, gpus: str, device: str) -> list:
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
    return slots[:n]


def planned(args, experiments: dict, profile: str, device: str, describe) -> tuple[list[dict], list | None]:
    """The specs a command plans for the experiments on a device, and the claims that judge them. It asks
    nothing of this host: ``describe(framework)`` gives the runner's facts (scripts/gpu_check prints the plan
    of a GPU it is not on). A script experiment's specs are its scripts' (reprokit/script_plan.py)."""
    claims = _claims(args, experiments)
    per_experiment = _options(args, profile, device, _frameworks(args), claims, experiments, args.dry_run)
    extra_dirs = tuple(d.resolve() for d in args.experiments)
    specs = []
    for name, o in per_experiment.items():
        exp = experiments[name]
        if exp.scripts:
            specs += script_plan.specs_for(name, exp.scripts, o, describe, code(extra_dirs), epochs=args.epochs)
            continue
        specs += planning.specs_for(exp, o, describe, code(extra_dirs))
        for variant, scripts in exp.script_variants.items():       # the posted scripts themselves
            if variant in o.variants:
                specs += script_plan.specs_for(name, scripts, o, describe, code(extra_dirs), epochs=args.epochs,
                                               variant=variant, setting=exp.resolved(o.profile))
    return specs, claims


def _scripts(args) -> dict[str, Path]:
    """--script FRAMEWORK=PATH, as given (repeatable)."""
    out = {}
    for given in args.script or []:
        framework, sep, path = given.partition("=")
        if not sep or framework not in FRAMEWORKS:
            raise UserError(f"--script {given!r} is not understood; use --script FRAMEWORK=PATH with FRAMEWORK one "
                            f"of {', '.join(FRAMEWORKS)}")
        out[framework] = Path(path)
    return out


def build(args) -> Matrix:
    """The matrix a `reprokit reproduce` command asks for, checked: bad input ends here, before any run."""
    frameworks = _frameworks(args)
    extra_dirs = tuple(d.resolve() for d in args.experiments)
    scripts = _scripts(args)
    if scripts:                           # a quick look at two scripts: they are the only experiment
        name = re.sub(r"[^a-z0-9_]+", "_", (args.name or "scripts").lower()).strip("_") or "scripts"
        known = {name: from_scripts(name, scripts)}
    else:
        known = discover([BUILTIN_DIR, *extra_dirs])
    experiments = selected(args, known)
    gpus_explicit = args.gpus is not None
    serving, at_once, slots, flavors = None, 1, [None], {}
    if args.backend == "ray":
        from reprokit import cluster
        if not args.ray_address:
            raise UserError("--backend ray needs --ray-address HOST:PORT, the address `ray start --head` printed.")
        if args.parallel != "1":
            raise UserError("--parallel is for one host; with --backend ray each GPU of the cluster takes one run "
                            "at a time, so leave --parallel out.")
        cluster.connect(args.ray_address)
        args.gpus = args.gpus or ("all" if cluster.has_gpus() else "none")
    else:
        args.gpus = args.gpus or ("all" if host_checks.host_has_gpu() else "none")
    device = "cpu" if args.gpus == "none" else "gpu"
    profile = "full" if args.full else args.profile or ("standard" if device == "gpu" else "quick")
    needed = {f for e in experiments.values() for f in e.frameworks if f in frameworks}
    if args.backend == "ray":
        runner, why = _head_runner(args, device, args.data_dir.resolve(), extra_dirs)
        serving, at_once = cluster.check(args.ray_runner, device, args.ray_address)
        why += f"; {len(serving)} node(s) of the cluster at {args.ray_address} can serve runs"
        gpu_name = None
    else:
        slots = _slots(args.parallel, args.gpus, device)
        assigned = host_checks.resolve_gpus(args.gpus) if device == "gpu" else []
        # The driver decides each framework's GPU build, before the runner describes any run.
        flavors = host_checks.gpu_flavors(needed, args.gpus) if assigned and args.python is None else {}
        runner, why = choose(backend=args.backend, python=args.python, gpus=args.gpus, gpus_explicit=gpus_explicit,
                             device=device, repo_root=REPO, envs_root=ENVS, data_dir=args.data_dir.resolve(),
                             extra_dirs=extra_dirs, frameworks=needed, flavors=flavors,
                             visible_gpus=",".join(g["uuid"] for g in assigned))
        gpu_name = assigned[0]["name"] if assigned else None
        if slots != [None]:
            at_once = len(slots)
            why += f"; {at_once} runs at once, one per {'fake (test-only) ' if slots[0].fake else ''}GPU slot"
    if args.from_report:
        specs = specs_from(args.from_report.resolve(), runner, device, args.data_dir.resolve(), code(extra_dirs),
                            args.offline)
        experiments = {k: v for k, v in known.items() if k in {s["experiment"] for s in specs}}
        profile = specs[0]["profile"]
    if args.from_report:
        claims = _claims(args, experiments)
    else:
        specs, claims = planned(args, experiments, profile, device, runner.describe)
    if device == "gpu":
        host_checks.check_precision({s["numerics"]["precision"] for s in specs if "numerics" in s}, args.gpus)
    return Matrix(specs, runner, why, known, claims, profile, device, gpu_name, slots, serving, at_once, flavors)

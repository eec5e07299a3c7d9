"""The composition root of a `reprokit reproduce` command: what it will run, decided before the first run, and
what runs it. The plan (reprokit/plan/) makes the specs; this module wires the runner and why, the executor and
its GPU slots, and the data step the plan reads through (reprokit/execute/data_step.py), and checks the host
(a cluster that cannot serve, too many --parallel, a GPU without the precision asked for) in one sentence each."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import cast

from reprokit import resources
from reprokit.claims import claims as claimlib
from reprokit.claims import sequential
from reprokit.environments import host_checks, topology
from reprokit.environments.envs import ENVS
from reprokit.errors import UserError
from reprokit.execute import data_step, device_placement, from_report
from reprokit.execute.executors import Executor, HostExecutor, RayExecutor
from reprokit.kits.contract.spec import RunSpec, Spec
from reprokit.plan import claimed, device_counts, frameworks, matrix, tuning
from reprokit.plan import plan as planning
from reprokit.plan.experiments import Experiment
from reprokit.plan.inputs import DataStep
from reprokit.plan.request import Request
from reprokit.results.provenance import code
from reprokit.runners.base import Runner
from reprokit.runners.choose import choose
from reprokit.runners.make import make


@dataclasses.dataclass(frozen=True)
class Matrix:
    """Everything planned before the first run: what runs, where, and what judges it. A policy of the run loop
    never changes it (reprokit/execute/loop.py): the specs a command comes to run are the loop's."""
    specs: tuple[Spec, ...]
    runner: Runner
    executor: Executor
    why: str
    experiments: dict[str, Experiment]          # every experiment known, for the report's titles
    claims: list[claimlib.Claim] | None
    profile: str
    device: str
    gpu_name: str | None
    data: DataStep                              # what the plan reads its data through: a later plan (bisect's) too
    # framework -> the GPU build it runs, and why
    flavors: dict[str, host_checks.Flavor] = dataclasses.field(default_factory=dict)
    # what the frameworks asked for do not run, and why, one line each (no posted code in that framework)
    not_run: list[str] = dataclasses.field(default_factory=list)
    rule: sequential.Rule | None = None         # --repeats auto: repeats until each claim's ratio is decided
    left_out: str | None = None                 # what no claim in play reads, left out, and how to add it
    devices: list[str] = dataclasses.field(default_factory=list)   # where the runs' devices are, for the plan


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


def _slots(parallel: str, gpus: str, device: str, grouped: bool = False) -> list[topology.Placement | None]:
    """One placement per run that may go at once; [None] for one run at a time with every assigned GPU. ``grouped``
    (--devices given): every assigned GPU's slot, of which each run holds as many as its devices."""
    if parallel != "auto" and not (parallel.isdigit() and int(parallel) >= 1):
        raise UserError(f"--parallel {parallel!r} is not understood; use auto or a number of runs at once, such as 4.")
    fake = topology.fake_slots()
    assigned = host_checks.resolve_gpus(gpus) if device == "gpu" and fake is None else []
    if parallel == "1" and not grouped:
        return [None]
    slots = fake if fake is not None else topology.gpu_slots(assigned)
    if not slots:
        if parallel in ("auto", "1"):
            return [None]
        raise UserError(f"--parallel {parallel} runs one run per GPU, and no GPU is assigned (--gpus {gpus}); "
                        f"on a CPU host use --parallel 1.")
    if grouped:                 # runs at once: reprokit/execute/device_placement.py, once the specs are known
        return [*slots]
    n = len(slots) if parallel == "auto" else int(parallel)
    if n > len(slots):
        raise UserError(f"--parallel {n} is more than the {len(slots)} GPU(s) assigned (--gpus {gpus}); use "
                        f"--parallel {len(slots)} or less, or assign more GPUs.")
    placed: list[topology.Placement | None] = [*slots[:n]]
    return placed


def build(request: Request) -> Matrix:
    """The matrix a `reprokit reproduce` command asks for, checked: bad input ends here, before any run."""
    what, where, how = request.what, request.where, request.how
    data = data_step.for_run(how.data_dir, how.dry_run, how.offline)
    known = matrix.known(what)
    experiments = matrix.selected(what, known)
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
    # the counts the plan runs at: --devices, else the experiment files' device_counts (a sweep where they differ)
    in_files = sorted({n for e in experiments.values() for n in e.device_counts})
    swept = what.devices or (tuple(in_files) if in_files != [1] else ())
    if where.executor == "ray":
        runner, why = _head_runner(where.runner, device, how.data_dir, what.experiment_dirs)
        serving, at_once, nodes = cluster.check(where.runner, device, address, max(device_counts.counts(swept)))
        why += f"; {len(serving)} node(s) of the cluster at {address} can serve runs"
        executor = RayExecutor(address, serving, at_once, device, how.data_dir, how.state_dir / "ledger",
                               what.experiment_dirs,
                               where.memory_limit)
        gpu_name = None
        mixed = tuning.DEFAULT_MIXED            # the nodes' GPUs are not known here: tuned's bf16 asks for 8.0
    else:
        slots = _slots(where.parallel, gpus, device, grouped=bool(swept))
        assigned = host_checks.resolve_gpus(gpus) if device == "gpu" else []
        # The driver decides each framework's GPU build, before the runner describes any run.
        flavors = host_checks.gpu_flavors(needed, gpus) if assigned and where.python is None else {}
        runner, why = choose(backend=where.runner, python=where.python, gpus=gpus,
                             gpus_explicit=where.gpus is not None, device=device, repo_root=resources.root(),
                             envs_root=ENVS,
                             data_dir=how.data_dir, extra_dirs=what.experiment_dirs, frameworks=needed,
                             flavors=flavors, visible_gpus=",".join(g["uuid"] for g in assigned),
                             dry_run=how.dry_run, memory_limit=where.memory_limit)
        gpu_name = assigned[0]["name"] if assigned else None
        mixed = host_checks.mixed_precision(gpus) if assigned else tuning.DEFAULT_MIXED
        executor = HostExecutor(how.state_dir / "work", how.state_dir / "ledger", slots,
                                gpus=tuple(g["uuid"] for g in assigned), device=device)
        # N larger than the host's devices refused before any data is prepared (a report's own counts: below)
        device_placement.runs_at_once(max(device_counts.counts(swept)), device, slots, len(assigned), gpus,
                                      where.parallel)
        executor.models = device_placement.check_models(swept, assigned, gpus, where.mixed_gpus)
        if slots != [None] and (first := slots[0]) is not None and not swept:   # a slot per run at once
            why += f"; {len(slots)} runs at once, one per {'fake (test-only) ' if first.fake else ''}GPU slot"
    if what.from_report:
        specs = from_report.specs_from(what.from_report, runner, device, how.data_dir, code(what.experiment_dirs),
                                       how.offline)
        experiments = {k: v for k, v in known.items() if k in {s.experiment for s in specs}}
        profile = specs[0].profile
        claims = matrix.claims_of(what, experiments)
        not_run: list[str] = []
        left_out = None
    else:
        specs, claims = matrix.planned(request, experiments, profile, device, runner.describe, data, mixed)
        specs, not_split = planning.runnable_at_n(specs)
        chosen = claimed.choose(what, experiments, claims, profile, device)
        options = matrix.options(what, profile, device, claims, {name: experiments[name] for name in chosen.kept},
                                 data_step.LookedUp(how.data_dir))
        not_run = [line for name, o in options.items() for line in planning.not_run(experiments[name], o)]
        not_run += not_split
        left_out = chosen.line()
    if device == "gpu":
        if any(s.variant == planning.TUNED for s in specs):
            host_checks.check_precision({"fp16_mixed"}, gpus, asked_by="--variants tuned (its mixed precision: "
                                        "bf16, or fp16 with loss scaling where a GPU has no bf16)",
                                        way_out="leave tuned out with --variants fixed,as_posted, or choose a "
                                                "newer GPU with --gpus")
        host_checks.check_precision({s.numerics.precision for s in specs if isinstance(s, RunSpec)}, gpus)
    rule = None if what.from_report else matrix.repeats_rule(what, device, claims)
    devices: list[str] = []
    if isinstance(executor, RayExecutor):       # each run on one node, placed on the nodes as described
        devices = device_placement.round_lines(specs, [[topology.Placement(str(i), None, "", None) for i in range(n)]
                                                       for n in nodes.values()], executor.at_once, [*nodes])
    if isinstance(executor, HostExecutor):      # the planned runs' counts of devices, placed
        counts = sorted({device_placement.held(s) for s in specs}) or [1]
        executor.widest = max(counts)
        executor.at_most = device_placement.runs_at_once(executor.widest, device, executor.slots,
                                                         len(executor.gpus or ()), gpus, where.parallel)
        devices = device_placement.lines(counts, device, executor.slots, executor.at_most)
        if executor.models:
            devices.append(f"{device_placement.MIXED_GPUS}; each result declares it, with the models of its GPUs")
        if executor.slots != [None]:
            devices += device_placement.round_lines(specs, [cast("list[topology.Placement]", executor.slots)],
                                                    executor.at_most)
    return Matrix(tuple(specs), runner, executor, why, known, claims, profile, device, gpu_name, data, flavors, not_run,
                  rule, left_out, devices)

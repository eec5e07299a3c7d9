"""One `reprokit reproduce` command as typed data: what to run, where, and how.

The CLI turns its arguments into a ``Request`` at the door and checks what it can
check without looking at the host; nothing below the CLI reads argparse's namespace.
"""
from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from reprokit.claims import sequential
from reprokit.environments import module_names
from reprokit.errors import UserError
from reprokit.kits.contract.names import FRAMEWORKS
from reprokit.plan import data_mounts, device_counts, launchers
from reprokit.results import safe_names

DEFAULT_VARIANTS = ("fixed", "as_posted", "tuned")
DEFAULT_CLAIMS = "seeds"
RUNNERS = ("auto", "docker", "local")       # how a kit process starts
EXECUTORS = ("host", "ray")                 # where the matrix is spread


@dataclass(frozen=True)
class ScriptCommand:
    """One --script: a path and its arguments (``FRAMEWORK=PATH ARGS``), or a module that ``python -m`` runs from
    the current folder (``FRAMEWORK=-m MODULE ARGS``), each after its launcher where it has one (``FRAMEWORK=torchrun
    --nproc-per-node 2 PATH ARGS``: the launcher's words, reprokit/plan/launchers.py)."""
    path: Path | None
    args: tuple[str, ...] = ()
    module: str | None = None
    cwd: Path = field(default_factory=Path.cwd)
    launcher: tuple[str, ...] = ()


@dataclass(frozen=True)
class What:
    """The experiments, their variants and sizes, and the claims that judge them."""
    frameworks: tuple[str, ...] = ()                # those --frameworks names; (): each experiment's own
    experiment_dirs: tuple[Path, ...] = ()          # resolved
    only: tuple[str, ...] = ()
    scripts: dict[str, ScriptCommand] = field(default_factory=dict)    # --script: the only experiment
    requires: dict[str, tuple[str, ...]] = field(default_factory=dict)     # --require: a script's packages
    mounts: dict[str, tuple[tuple[str, Path], ...]] = field(default_factory=dict)   # --data: a script's own data
    name: str | None = None
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    variants_named: bool = False                    # --variants given: each runs for every experiment, tuned too
    everything: bool = False                        # --all: even what no claim in play reads (reprokit/plan/claimed.py)
    ablation: bool = False
    claims: str = DEFAULT_CLAIMS                    # a name, a file, or "none"
    profile: str | None = None                      # None: the hardware's default
    repeats: int | None = None                      # None: the profile's default, or --repeats auto's minimum
    auto_repeats: bool | None = None                # --repeats auto; None: the hardware's default (auto on a GPU)
    repeats_cap: int | None = None                  # --repeats-cap (with auto); None: the rule's default
    dataset: str | None = None
    max_steps: int | None = None
    epochs: int | None = None
    timeout_s: float | None = None
    from_report: Path | None = None                 # resolved
    devices: tuple[int, ...] = ()                   # --devices: each count a run of its own; (): one device each


@dataclass(frozen=True)
class Where:
    """The runner (how a process starts) and the executor (where the matrix is spread)."""
    runner: str = "auto"
    executor: str = "host"
    gpus: str | None = None                         # None: all if any
    parallel: str = "1"
    ray_address: str | None = None
    python: Path | None = None
    memory_limit: str = "auto"                      # each container's memory: auto (a share of the host's), SIZE, none
    mixed_gpus: bool = False                        # --mixed-gpus: a sweep may run on GPUs that differ in model


@dataclass(frozen=True)
class How:
    """The folders and the switches of the command."""
    data_dir: Path
    state_dir: Path
    reports_dir: Path
    offline: bool = False
    fresh: bool = False
    dry_run: bool = False
    certify: bool = True
    wait: bool = False                              # queue behind another command on the same state folder
    gpu_model: str | None = None                    # a dry run's cost on this GPU model (reprokit/plan/cost.py)
    price_per_hour: float | None = None


@dataclass(frozen=True)
class Request:
    what: What
    where: Where
    how: How


def _frameworks(given: str | None) -> tuple[str, ...]:
    """--frameworks as given; () where it is not: each experiment's own (reprokit/plan/frameworks.py)."""
    if given is None:
        return ()
    chosen = tuple(f.strip() for f in given.split(",") if f.strip())
    unknown = set(chosen) - set(FRAMEWORKS)
    if unknown or not chosen:
        raise UserError(f"--frameworks: unknown {', '.join(sorted(unknown)) or '(empty)'}; "
                        f"allowed: {', '.join(FRAMEWORKS)}")
    return chosen


def _scripts(given: list[str] | None) -> dict[str, ScriptCommand]:
    """--script "FRAMEWORK=[LAUNCHER] PATH ARGS..." or "FRAMEWORK=[LAUNCHER] -m MODULE ARGS..." (repeatable): the
    launcher, the path or module and its arguments, split as a shell splits them (a path that names a file as given
    is taken whole, spaces and all)."""
    out = {}
    for one in given or []:
        framework, sep, command = one.partition("=")
        if not sep or framework not in FRAMEWORKS:
            raise UserError(f"--script {one!r} is not understood; use --script FRAMEWORK=PATH with FRAMEWORK one "
                            f"of {', '.join(FRAMEWORKS)}")
        try:
            words = [command] if Path(command).is_file() else shlex.split(command)
        except ValueError as exc:
            raise UserError(f"--script {one!r}: its arguments do not split as a shell would ({exc}); quote them "
                            f"as you would on a command line") from None
        if not words:
            raise UserError(f"--script {one!r} names no script; use --script FRAMEWORK=PATH")
        launcher, words = launchers.split(words, f"--script {one!r}")
        if words[0] == "-m":
            if len(words) < 2 or not all(part.isidentifier() for part in words[1].split(".")):
                raise UserError(f"--script {one!r} names no module after -m; use --script \"FRAMEWORK=-m MODULE "
                                f"[ARGS]\", as python -m MODULE runs it from the current folder")
            out[framework] = ScriptCommand(None, tuple(words[2:]), module=words[1], launcher=launcher)
        else:
            out[framework] = ScriptCommand(Path(words[0]), tuple(words[1:]), launcher=launcher)
        if launcher:              # what no run could change: refused here, naming the --script
            launchers.check(*launchers.parse(shlex.join(launcher), f"--script {one!r}"), f"--script {one!r}",
                            module=words[0] == "-m")
    return out


def _requires(given: list[str] | None) -> dict[str, tuple[str, ...]]:
    """--require FRAMEWORK=NAME[,NAME...] (repeatable): the packages by framework, split at each comma that
    starts another name (a comma of a version range, >=3.5,<4, or of extras, a[b,c], does not), each once."""
    out: dict[str, tuple[str, ...]] = {}
    for one in given or []:
        framework, _, names = one.partition("=")
        split = module_names.split_names(names)
        if framework not in FRAMEWORKS or not split:
            raise UserError(f"--require {one!r} is not understood; use --require FRAMEWORK=NAME[,NAME...] with "
                            f"FRAMEWORK one of {', '.join(FRAMEWORKS)}, e.g. --require pytorch=matplotlib")
        out[framework] = tuple(module_names.names_once([*out.get(framework, ()), *split]))     # each once, in order
    return out


def _where(ns: argparse.Namespace) -> Where:
    """--backend docker|local|ray are aliases: docker and local name the runner, ray the executor (whose nodes
    use --ray-runner)."""
    runner, executor = ns.runner, ns.executor
    if ns.backend == "ray":
        executor, runner = "ray", ns.ray_runner
    elif ns.backend != "auto":
        runner = ns.backend
    if executor == "ray":
        if not ns.ray_address:
            raise UserError("--backend ray needs --ray-address HOST:PORT, the address `ray start --head` printed.")
        if ns.parallel != "1":
            raise UserError("--parallel is for one host; with --backend ray each GPU of the cluster takes one run "
                            "at a time, so leave --parallel out.")
        if ns.python is not None:
            raise UserError("--python names an interpreter on this host; with --backend ray each node uses its own "
                            "runner (--ray-runner docker or local), so leave --python out.")
        runner = "docker" if runner == "auto" else runner
    return Where(runner=runner, executor=executor, gpus=ns.gpus, parallel=ns.parallel, ray_address=ns.ray_address,
                 python=ns.python, memory_limit=ns.memory_limit, mixed_gpus=ns.mixed_gpus)


def _repeats(given: str | None, cap: int | None, claims: str) -> tuple[int | None, bool | None]:
    """--repeats N or auto, as (repeats, auto); (None, None) where it is not given."""
    if given is None or given == "auto":
        auto = None if given is None else True
        if auto and claims == "none":
            raise UserError("--repeats auto adds repeats until each claim's ratio is decided, and --claims none "
                            "gives it no claim; give --repeats N, or claims")
        if cap is not None and not auto:
            raise UserError(f"--repeats-cap {cap} bounds --repeats auto; add --repeats auto or leave the cap out")
        if cap is not None:
            sequential.Rule(cap)                    # refuses a cap below the rule's minimum
        return None, auto
    try:
        repeats = int(given)
    except ValueError:
        raise UserError(f"--repeats {given!r} is not a number of repeats; give N (1 or more) or auto") from None
    if repeats < 1:
        raise UserError(f"--repeats must be at least 1, got {repeats}")
    if cap is not None:
        raise UserError(f"--repeats-cap {cap} bounds --repeats auto, not --repeats {repeats}; leave one out")
    return repeats, False


def from_args(ns: argparse.Namespace) -> Request:
    """The command's request, with what can be refused without the host refused here, in one sentence."""
    repeats, auto = _repeats(ns.repeats, ns.repeats_cap, ns.claims)
    if auto and ns.from_report is not None:
        raise UserError("--from REPORT runs that report's own runs again, repeats included; leave --repeats auto out")
    for flag, value in (("--max-steps", ns.max_steps), ("--epochs", ns.epochs)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1, got {value}")
    if ns.gpu_model is not None and not ns.dry_run:
        raise UserError(f"--gpu-model {ns.gpu_model} estimates what the plan would cost on that GPU and starts "
                        f"nothing; add --dry-run")
    if ns.price_per_hour is not None and (ns.gpu_model is None or ns.price_per_hour <= 0):
        raise UserError(f"--price-per-hour {ns.price_per_hour} prices a --gpu-model estimate; give a positive "
                        f"price with --gpu-model NAME --dry-run")
    if ns.name is not None and (why := safe_names.report_problem(ns.name)):
        raise UserError(f"--name {safe_names.shown(ns.name)} {why}; give a name such as my_run or runs/my_run")
    variants = tuple(v.strip() for v in ns.variants.split(",") if v.strip()) if ns.variants else DEFAULT_VARIANTS
    what = What(frameworks=_frameworks(ns.frameworks), experiment_dirs=tuple(d.resolve() for d in ns.experiments),
                only=tuple(ns.only or ()), scripts=_scripts(ns.script), name=ns.name, variants=variants,
                requires=_requires(ns.require), mounts=data_mounts.parse(getattr(ns, "data", None)),
                variants_named=bool(ns.variants), everything=ns.everything,
                ablation=ns.ablation, claims=ns.claims,
                profile="full" if ns.full else ns.profile,
                repeats=repeats, auto_repeats=auto, repeats_cap=ns.repeats_cap, dataset=ns.dataset,
                max_steps=ns.max_steps, epochs=ns.epochs,
                timeout_s=ns.timeout, from_report=ns.from_report.resolve() if ns.from_report else None,
                devices=device_counts.parse(ns.devices))
    how = How(data_dir=ns.data_dir.resolve(), state_dir=ns.state_dir.resolve(), reports_dir=ns.reports_dir.resolve(),
              offline=ns.offline, fresh=ns.fresh, dry_run=ns.dry_run, certify=ns.certify, wait=ns.wait,
              gpu_model=ns.gpu_model, price_per_hour=ns.price_per_hour)
    return Request(what, _where(ns), how)

"""reprokit reproduce: plan the matrix, run what is not finished, write the report.

By default it reproduces the seed cases, and runs only what a claim comparable
on this hardware and profile reads (claims/seeds.toml): for each experiment,
the `fixed` and `as_posted` variants in both frameworks, `tuned` (each framework
at its best, its settings each also alone) where a claim reads it, each pitfall
that a claim names run alone, and the claims' verdicts, on the profile the
hardware allows (standard on a GPU, quick on a CPU). An experiment whose claims
are all for other hardware (ResNet-50's are GPU-only) is left out; the plan says
in one line what it left out and how to add it (--all, --only, --ablation).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from reprokit import doctor
from reprokit.bisect import search, sides
from reprokit.certify import certify_plan, certify_runs
from reprokit.claims import sequential
from reprokit.console import RunProgress, duration, run_label
from reprokit.environments import datasets, env_cache, published_datasets, requirement_sets
from reprokit.environments.envs import ENVS
from reprokit.errors import UserError
from reprokit.execute import compose, data_step, device_placement, disk_full, locks, loop, policies, stopping
from reprokit.kits.contract.names import BROKEN, FRAMEWORKS
from reprokit.kits.contract.spec import Spec
from reprokit.kits.framework_free import data as kitdata
from reprokit.places import DATA, REPORTS, STATE, check_writable, first_line
from reprokit.plan import cost, estimate, repeats, request, tuning
from reprokit.plan.experiments import PROFILES
from reprokit.report import compare, publish
from reprokit.results.store import Store
from reprokit.runners.make import make


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="reprokit reproduce", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", choices=PROFILES,
                   help="quick (CPU-sized), standard (default on a GPU) or full (the seeds' literal length)")
    p.add_argument("--full", action="store_true", help="same as --profile full")
    p.add_argument("--only", action="append", metavar="EXPERIMENT", help="run only this experiment (repeatable)")
    p.add_argument("--experiments", action="append", type=Path, default=[], metavar="DIR",
                   help="also load experiments from this folder (repeatable)")
    p.add_argument("--frameworks", default=None,
                   help="comma-separated registered frameworks to run (default: each experiment's own "
                        f"`frameworks`); may add any of {', '.join(FRAMEWORKS)} whose kit can run the experiment")
    p.add_argument("--repeats", metavar="N|auto",
                   help="runs of each configuration, each in a fresh process; auto: at least 3, more until each "
                        "claim's ratio is decided (docs/claims.md) (default: auto on a GPU, 1 on quick, else 5)")
    p.add_argument("--repeats-cap", type=int, metavar="N",
                   help=f"with --repeats auto: at most N repeats of a configuration (default {sequential.DEFAULT_CAP})")
    p.add_argument("--variants", help="comma-separated: fixed, tuned (each framework's fast path) and/or variants "
                                      "the experiments define, each for every experiment (default: fixed,as_posted, "
                                      "and tuned where a claim reads it; plain runs: --variants fixed)")
    p.add_argument("--all", dest="everything", action="store_true",
                   help="also what no claim comparable here reads: every experiment, and tuned for each")
    p.add_argument("--ablation", action="store_true",
                   help="also run every pitfall of the chosen variants alone (by default only those a claim names), "
                        "and each of as_posted's factors removed alone, for each factor's share of the gap")
    p.add_argument("--claims", metavar="NAME|FILE|none", default=request.DEFAULT_CLAIMS,
                   help="claims to give verdicts on (default seeds: claims/seeds.toml; none for no verdicts)")
    p.add_argument("--backend", choices=("auto", "docker", "local", "ray"), default="auto",
                   help="where runs happen; ray: on the nodes of an existing Ray cluster (--ray-address); "
                        "docker and local are short for --runner, ray for --executor ray")
    p.add_argument("--runner", choices=request.RUNNERS, default="auto",
                   help="how each run starts: in the pinned Docker image, or a local virtualenv (auto: Docker "
                        "where it can work here)")
    p.add_argument("--executor", choices=request.EXECUTORS, default="host",
                   help="where the matrix is spread: this host, or the nodes of a Ray cluster (--ray-address)")
    p.add_argument("--gpus", default=None,
                   help="none, all, or comma-separated GPU indices or UUIDs (default: all if any)")
    p.add_argument("--parallel", default="1", metavar="auto|N",
                   help="runs at once on this host, one per assigned GPU, each pinned to CPUs near it "
                        "(auto: one per GPU; default 1: one run at a time with every assigned GPU)")
    p.add_argument("--devices", metavar="N[,N...]",
                   help="the devices one run holds, taken from those --gpus assigns: N GPUs (--parallel auto "
                        "then runs floor(GPUs/N) at once), or on a CPU host N stand-in devices, at most its usable "
                        "CPUs, declared in each result. A script runs as its launcher starts it; the kit's own "
                        "experiments train data-parallel (DDP, MirroredStrategy, a JAX mesh). Several counts make a "
                        "sweep: each run at each, in one matrix (default: an experiment file's device_counts, else "
                        "one device, and at --parallel 1 every assigned GPU)")
    p.add_argument("--mixed-gpus", action="store_true",
                   help="let a --devices sweep run on GPUs that differ in model (refused otherwise), declared in each "
                        "result and in the report")
    p.add_argument("--ray-address", metavar="HOST:PORT", help="the Ray cluster's head (with --backend ray)")
    p.add_argument("--ray-runner", choices=("docker", "local"), default="docker",
                   help="the runner each Ray node uses: its Docker engine with the pinned images (default), "
                        "or virtualenvs from the lock files")
    p.add_argument("--python", type=Path, help="run the kits with this interpreter instead of building virtualenvs")
    p.add_argument("--dataset", choices=datasets.DATASETS, help="override the profile's dataset")
    p.add_argument("--data-dir", type=Path, default=DATA,
                   help="dataset cache (default: the per-user cache's data/, shared by every project)")
    p.add_argument("--state-dir", type=Path, default=STATE,
                   help=f"finished results and scratch space (default {STATE} in the folder the command runs in)")
    p.add_argument("--reports-dir", type=Path, default=REPORTS,
                   help=f"where <name>/ goes (default {REPORTS} in the folder the command runs in)")
    p.add_argument("--offline", action="store_true", help="never download; fail early if data is missing")
    p.add_argument("--name", help="report name: <reports-dir>/<name>/ (default runs/<date>-<profile>-<device>)")
    p.add_argument("--from", dest="from_report", type=Path, metavar="REPORT",
                   help="re-run the exact specs of a report folder (e.g. reports/seeds-quick-cpu) on this machine")
    p.add_argument("--timeout", type=float, help="seconds per run before it is stopped (default by profile)")
    p.add_argument("--max-steps", type=int, help="at most this many training steps per epoch (recorded in the spec; "
                                                 "a script's evaluation passes too)")
    p.add_argument("--script", action="append", metavar="FRAMEWORK=[LAUNCHER] PATH [ARGS]",
                   help="run this script of your own, unmodified, under the probe (repeatable: one per framework); "
                        "the two scripts are then the experiment. Its arguments follow the path, split as a shell "
                        "splits them: --script \"pytorch=main.py --epochs 1 --lr 0.01\". A script that imports its "
                        "own package runs as its module from the package's root; FRAMEWORK=-m MODULE [ARGS] runs "
                        "python -m MODULE from the current folder. A launcher may come first, with its options: "
                        "torchrun, python -m torch.distributed.run, accelerate launch or fabric run "
                        "(--script \"pytorch=torchrun --nproc-per-node 2 train.py\"), its count that of --devices")
    p.add_argument("--require", action="append", metavar="FRAMEWORK=NAME[,NAME...]",
                   help="packages that framework's script imports beyond its lock, each a name with an optional "
                        "version range (repeatable, or comma-separated: --require pytorch=matplotlib,tqdm); "
                        "replaces the requirements.txt beside the script. Resolved against the lock into "
                        "hash-pinned wheels before any run; a line for a package of the lock is left to the lock")
    p.add_argument("--data", action="append", metavar="[FRAMEWORK:]WHERE=FOLDER",
                   help="a folder of your own data, shown to a script where it reads it (WHERE relative to the "
                        "script's folder, e.g. --data pytorch:./data=/datasets/mine; repeatable; without FRAMEWORK "
                        "for both scripts): read-only in Docker, a link on the local runner. The datasets the kit "
                        "knows by name are still served by the kit")
    p.add_argument("--epochs", type=int, help="a script experiment: stop each script after this many epochs")
    p.add_argument("--memory-limit", default="auto", metavar="auto|SIZE|none",
                   help="each container's memory limit (Docker runner): auto is a share of this host's memory, "
                        "SIZE e.g. 16g, none for no limit")
    p.add_argument("--wait", action="store_true",
                   help="if another command is using the state folder, wait for it to end instead of refusing")
    p.add_argument("--fresh", action="store_true", help="ignore finished results and run everything again")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan with time estimates and exit; starts nothing, downloads nothing")
    p.add_argument("--gpu-model", metavar="NAME",
                   help="with --dry-run: the plan's GPU time on this GPU model (e.g. H100-SXM, A100-40GB, L4), from "
                        "finished runs on it and the plan's FLOPs at a share of the datasheet peak")
    p.add_argument("--price-per-hour", type=float, metavar="PRICE",
                   help="with --gpu-model: also the plan's cost at this price per GPU-hour")
    p.add_argument("--no-certify", dest="certify", action="store_false",
                   help="skip the equivalence certificates (the report then says they were skipped)")
    return p


def _print_plan(m: compose.Matrix, done: set[str], history: list[dict[str, Any]]) -> list[tuple[float | None, str]]:
    """The plan, one line per run with its estimate; returns the estimates of the runs to do."""
    todo = [s for s in m.specs if s.run_id not in done]
    estimates = [estimate.seconds(s, history, m.gpu_name) for s in todo]
    builds = m.executor.builds(m.runner, {s.framework for s in todo})
    known = _sum_known([e for e, _ in estimates])
    at_once = max(1, min(m.executor.at_once, len(todo)))
    total = None if known is None else known / at_once + estimate.ENV_BUILD_S * len(builds)
    # tuned's ids are known once its settings alone have run (execute/policies.py): not counted as done or to run here
    tuned = sum(s.variant == tuning.TUNED for s in todo)
    then = f", then {tuned} tuned, run where not finished before" if tuned else ""
    print(f"\nplan: {len(m.specs)} runs, profile {m.profile} on {m.device}"
          f"{f' ({m.gpu_name})' if m.gpu_name else ''}, {m.executor.describe(m.runner)}; {len(done)} already "
          f"finished, {len(todo) - tuned} to run{then}, estimated {duration(total)}"
          + (f" (including building {', '.join(builds)})" if builds else ""))
    ahead = iter(estimates)
    for i, s in enumerate(m.specs, 1):
        if s.run_id in done:
            when = "done"
        else:
            seconds, how = next(ahead)
            when = f"~{duration(seconds)} ({how})" + (", once its settings alone have run" if s.variant == tuning.TUNED
                                                      else "")
        run_id = s.run_id if s.data.sha256 else "(id once data is prepared)"
        held = f" {n} devices" if (n := device_placement.held(s)) > 1 else ""
        print(f"  {i:>2}. {run_id:<16}  {s.experiment:<26} {s.framework:<10} {s.variant:<28} r{s.repeat}{held}  "
              f"{when}")
    for line in [*m.devices, *m.not_run]:
        print(f"  {line}")
    if m.left_out:
        print(m.left_out)
    if more := repeats.plan_line(m.specs, m.claims, m.rule):
        print(more)
    print()
    return estimates


def _sum_known(values: list[float | None]) -> float | None:
    """Their sum, or None if any of them is unknown."""
    known = [v for v in values if v is not None]
    return sum(known) if len(known) == len(values) else None


def parse(argv: list[str] | None) -> request.Request:
    """The typed request of a `reprokit reproduce` command line."""
    return request.from_args(_parser().parse_args(argv))


def reproduce(argv: list[str] | None = None) -> int:
    req = parse(argv)
    print(first_line(req.how.state_dir, req.how.reports_dir), flush=True)
    if not req.how.dry_run:                  # a dry run writes nothing: it runs in a read-only folder too
        check_writable(req.how.state_dir, req.how.reports_dir)
    if req.how.gpu_model is not None:
        return _cost(req)
    m = compose.build(req)                    # a bad spec is refused before the state folder is touched
    if req.how.dry_run:                      # starts nothing, so it waits for no one
        return _reproduce(req, m)
    with locks.state_folder(req.how.state_dir, req.how.wait):
        return _reproduce(req, m)


def _cost(req: request.Request) -> int:
    """A dry run priced on a GPU model this host need not have: the plan, its GPU time and, with a price, its cost."""
    model = cost.gpu_model(req.how.gpu_model or "")
    history = Store(req.how.state_dir / "results").all()
    print("\n".join(cost.dry_run(req, data_step.LookedUp(req.how.data_dir), history, model)))
    print("dry run: nothing was started.")
    return 0


def _reproduce(req: request.Request, m: compose.Matrix) -> int:
    what, how = req.what, req.how
    print(f"backend: {m.runner.name} ({m.why})")
    for fw, flavor in sorted(m.flavors.items()):
        print(f"GPU build: {fw} {flavor.name} (CUDA {flavor.cuda}): {flavor.why}")
    store = Store(how.state_dir / "results")
    done = {s.run_id for s in m.specs if not how.fresh and (r := store.get(s.run_id)) and r["status"] == "ok"}
    todo = [s for s in m.specs if s.run_id not in done]
    estimates = _print_plan(m, done, store.all())
    if how.dry_run:
        print("dry run: nothing was started. Run the same command without --dry-run to start it.")
        return 0
    if todo:
        m.executor.prepare(m.runner, {s.framework for s in todo})
    as_json = [s.to_dict() for s in m.specs]          # what the certificates and the wheels' fetch read
    requirement_sets.install_all(as_json)        # scripts' extra requirements: installed once per machine
    certificates = certify_runs.for_matrix(as_json, m.executor.untimed(m.runner), how.state_dir, how.certify,
                                           *certify_plan.trajectory_budget(m.device, m.gpu_name))

    def progress_for(i: int, spec: Spec) -> RunProgress:
        after = _sum_known([e for e, _ in estimates[i + 1:]])
        return RunProgress(f"[run {i + 1}/{len(todo)}] {run_label(spec)}", estimates[i][0],
                           None if after is None else after / m.executor.at_once)

    rounds: list[loop.Policy] = [policies.Once(policies.first(todo), progress_for), policies.Tuned()]
    if m.rule is not None:
        rounds.append(policies.UntilDecided(m.claims or [], m.rule))
    ran = loop.run(m.executor, m.runner, store, m.specs, rounds)
    failures = ran.failures
    if ran.interrupted:
        stored = sum(store.get(s.run_id) is not None for s in ran.specs)
        print("\n" + stopping.resume_line(f" in {store.root} ({stored} of {len(ran.specs)} runs)"))
        return stopping.STOPPED

    name = what.name or publish.default_name(m.profile, m.device)
    if what.from_report and not what.name:
        name = f"{publish.default_name(m.profile, m.device)}-from-{what.from_report.name}"
    report_dir = how.reports_dir / name
    kept, kept_certs = publish.earlier(report_dir, {s.experiment for s in ran.specs})
    if kept:
        print(f"report: keeping {len(kept)} finished result(s) of "
              f"{', '.join(sorted({r['experiment'] for r in kept}))} from the earlier report of this name")
    finished = [r for s in ran.specs if (r := store.get(s.run_id)) is not None]     # every run's, by now
    try:
        path = publish.publish(report_dir, name, [*kept, *finished], m.experiments, m.claims,
                               {**kept_certs, **certificates}, m.rule, m.left_out)
    except OSError as exc:
        if not disk_full.is_full(exc):
            raise
        need = sum(disk_full.size(store.path(r["run_id"])) for r in finished)
        raise disk_full.DiskFull(f"{how.reports_dir} is full: the report {name} needs at least "
                                 f"{disk_full.amount(need)} (the copies of its result files, besides its text and "
                                 f"plots); free space there and run the same command again (the finished runs are "
                                 f"kept in {store.root}).") from None
    print(f"\nreport: {_shown(path)}" + (f"  ({failures} run(s) failed: see the report)" if failures else ""))
    return 1 if failures else 0


def _shown(path: Path) -> str:
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def compare_sets(argv: list[str]) -> int:
    """reprokit compare A B: every paired metric of B against A, with brackets and tests."""
    p = argparse.ArgumentParser(prog="reprokit compare", description=compare_sets.__doc__)
    p.add_argument("a", type=Path, help="a report folder (reports/<name>) or a folder of result files")
    p.add_argument("b", type=Path, help="the result set to hold against A")
    p.add_argument("--out", type=Path, help="also write the comparison to this markdown file")
    args = p.parse_args(argv)
    print(first_line())
    text = compare.render(compare.compare(compare.load(args.a), compare.load(args.b)), _shown(args.a), _shown(args.b))
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


def prepare_data(argv: list[str]) -> int:
    """reprokit data: the separate data step. CIFAR-10 for every kit, and the posted readers' own formats:
    the archive's batches for torchvision, and TFDS's cifar10 built by TFDS in the TensorFlow environment."""
    p = argparse.ArgumentParser(prog="reprokit data", description=prepare_data.__doc__)
    p.add_argument("--data-dir", type=Path, default=DATA,
                   help="dataset cache (default: the per-user cache's data/, shared by every project)")
    p.add_argument("--python", type=Path, help="a TensorFlow interpreter with tensorflow-datasets (default: the "
                                               "local TensorFlow environment, built from its lock file)")
    p.add_argument("--offline", action="store_true", help="never download: the archives must be in --data-dir")
    p.add_argument("names", nargs="*", metavar="NAME", help="stage these datasets a script may load by name instead "
                   "(mnist, fashion_mnist, cifar10, cifar100), each from its published files, checked")
    args = p.parse_args(argv)
    print(first_line())
    data_dir = args.data_dir.resolve()
    for name in args.names:
        print(published_datasets.stage(name, data_dir, allow_download=not args.offline))
    if args.names:
        return 0
    wanted = {"dataset": "cifar10", "train_samples": None, "test_samples": None, "seed": 0}
    print(f"data: {datasets.prepare(wanted, data_dir, allow_download=not args.offline).file} and "
          f"{datasets.cifar10_batches(data_dir, allow_download=not args.offline).name}/ in {data_dir}")
    runner = make("local", data_dir=data_dir, device="cpu", python=args.python)     # the network is needed
    print(f"data: TFDS's cifar10 in {data_dir / kitdata.TFDS_CIFAR10} "
          f"(sha256 {data_step.tfds(data_dir, runner, STATE.resolve() / 'work')['sha256'][:12]})")
    return 0


def _bisect_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="reprokit bisect", description=bisect_sides.__doc__)
    p.add_argument("a", help="the side whose ratio is to be explained: a variant of --experiment (e.g. as_posted), "
                             "or a result set (reports/<name>, a folder of result files; PATH@VARIANT for one of "
                             "several variants)")
    p.add_argument("b", help="the side to start from, as A (e.g. fixed)")
    p.add_argument("--experiment", metavar="NAME", help="A and B are variants of this experiment")
    p.add_argument("--experiments", action="append", type=Path, default=[], metavar="DIR",
                   help="also load experiments from this folder (repeatable)")
    p.add_argument("--budget", type=int, default=search.DEFAULT_BUDGET,
                   help=f"runs this bisect may start (default {search.DEFAULT_BUDGET}); refused before any run "
                        f"where the worst case needs more")
    p.add_argument("--repeats", type=int, default=search.DEFAULT_REPEATS,
                   help=f"repeats of each framework's run per step (default {search.DEFAULT_REPEATS})")
    p.add_argument("--max-repeats", type=int, help="an undecided step is repeated up to this many repeats "
                                                   "(default twice --repeats)")
    p.add_argument("--claims", metavar="NAME|FILE|none", default=request.DEFAULT_CLAIMS,
                   help="the claims whose ratio threshold the bisect cuts at (default seeds)")
    p.add_argument("--claim", metavar="ID", help="the claim to take the quantity and threshold from")
    p.add_argument("--quantity", help="the quantity of the ratio (default: the claim's)")
    p.add_argument("--threshold", type=float, help="the ratio to cut at (default: the claim's)")
    same = "as for reproduce"
    p.add_argument("--profile", choices=PROFILES, help="quick, standard or full (default: the hardware's, or the "
                                                       "result sets')")
    p.add_argument("--max-steps", type=int, help="at most this many training steps per epoch (default: the result "
                                                 "sets', else the profile's)")
    p.add_argument("--timeout", type=float, help=same)
    p.add_argument("--dataset", choices=datasets.DATASETS, help=same)
    p.add_argument("--backend", choices=("auto", "docker", "local"), default="auto", help=same)
    p.add_argument("--python", type=Path, help=same)
    p.add_argument("--gpus", default=None, help=same)
    p.add_argument("--data-dir", type=Path, default=DATA, help=same)
    p.add_argument("--state-dir", type=Path, default=STATE, help=f"{same}; the steps' runs are kept there")
    p.add_argument("--offline", action="store_true", help=same)
    p.add_argument("--wait", action="store_true", help=same)
    return p


def bisect_sides(argv: list[str]) -> int:
    """reprokit bisect A B: the smallest set of the declared settings (pitfalls, numerics) in which A and B differ
    that moves the measured ratio across the published threshold, found by delta debugging over real runs."""
    args = _bisect_parser().parse_args(argv)
    ns = _parser().parse_args([])        # reproduce's defaults, with what the bisect was given over them
    for dest in ("experiments", "profile", "max_steps", "timeout", "dataset", "backend", "python", "gpus",
                 "data_dir", "state_dir", "offline", "wait"):
        setattr(ns, dest, getattr(args, dest))
    req = request.from_args(ns)
    print(first_line(req.how.state_dir, req.how.reports_dir), flush=True)
    check_writable(req.how.state_dir, None)          # its steps' runs are kept there; it writes no report
    limits = sides.limits(args.budget, args.repeats, args.max_repeats)
    prepared = sides.prepare(req, args.a, args.b, args.experiment, args.claims, args.claim, args.quantity,
                             args.threshold, limits)
    with locks.state_folder(req.how.state_dir, req.how.wait):
        return search.run(sides.start(prepared))


def cache_verb(argv: list[str]) -> int:
    """reprokit cache list|prune: the per-user cache of kit environments and of scripts' requirement sets and their
    wheels ($REPROKIT_CACHE, else $XDG_CACHE_HOME/reprokit, else ~/.cache/reprokit), shared by every clone; prune
    removes the environments and sets whose lock file has changed or is gone, the half-built ones and those unused
    for --unused-days, then the wheels no remaining set uses, never one in use."""
    p = argparse.ArgumentParser(prog="reprokit cache", description=cache_verb.__doc__)
    p.add_argument("action", choices=["list", "prune"], metavar="list|prune",
                   help="list the environments, requirement sets and wheels, or remove those no command needs")
    p.add_argument("--unused-days", type=float, default=30, metavar="N",
                   help="prune: also remove environments, sets and wheels no command used for N days (default 30)")
    args = p.parse_args(argv)
    print(first_line())
    print(env_cache.list_text(ENVS) if args.action == "list" else env_cache.prune(ENVS, args.unused_days))
    return 0


def doctor_verb(argv: list[str]) -> int:
    """reprokit doctor: what this host offers (Docker, the NVIDIA runtime, GPUs, driver, CUDA builds, the per-user
    cache, the frameworks) and what a run would pick and why, in one screen; exit 1 where a run could not start."""
    p = argparse.ArgumentParser(prog="reprokit doctor", description=doctor_verb.__doc__)
    p.add_argument("--state-dir", type=Path, default=STATE,
                   help="the state folder a run would use (default %(default)s)")
    p.add_argument("--reports-dir", type=Path, default=REPORTS,
                   help="the reports folder a run would use (default %(default)s)")
    args = p.parse_args(argv)
    return doctor.run(args.state_dir, args.reports_dir)


VERBS = {"reproduce": reproduce, "compare": compare_sets, "data": prepare_data, "bisect": bisect_sides,
         "cache": cache_verb, "doctor": doctor_verb}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--version"], ["-V"]):
        print(doctor.version_line())
        return 0
    if not argv or argv[0] not in VERBS:
        print("usage: reprokit reproduce [options] | reprokit compare A B | reprokit bisect A B [options] | "
              "reprokit data [options] | reprokit cache list|prune | reprokit doctor | reprokit --version   "
              "(see reprokit VERB --help)", file=sys.stderr)
        return 2
    for sentence in BROKEN:         # a plugin that did not load is named; the other frameworks work
        print(f"warning: {sentence}", file=sys.stderr)
    # A stop from outside (kill, a CI's timeout) ends as Ctrl-C does, else the kit's process would train on, orphaned.
    with stopping.installed():
        try:
            return VERBS[argv[0]](argv[1:])
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("\n" + stopping.resume_line(), file=sys.stderr)
            return stopping.STOPPED


if __name__ == "__main__":
    sys.exit(main())

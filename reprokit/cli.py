"""reprokit reproduce: plan the matrix, run what is not finished, write the report.

By default it reproduces the seed cases: for each experiment, the `fixed` and
`as_posted` variants in both frameworks, each pitfall that a claim names run
alone, and the claims' verdicts (claims/seeds.toml), on the profile the
hardware allows (standard on a GPU, quick on a CPU).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from kits.common.files import write_json_atomic
from kits.common.names import FRAMEWORKS
from reprokit import certify_plan, datasets, estimate, matrix, publish, schedule, script_requirements
from reprokit.certificate import certify_many
from reprokit.script_certificate import certify_scripts
from reprokit.console import RunProgress, duration
from reprokit.envs import ENVS, STATE
from reprokit.errors import UserError
from reprokit.experiments import PROFILES
from reprokit.provenance import REPO
from reprokit.report import compare
from reprokit.store import Store


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="reprokit reproduce", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", choices=PROFILES,
                   help="quick (CPU-sized), standard (default on a GPU) or full (the seeds' literal length)")
    p.add_argument("--full", action="store_true", help="same as --profile full")
    p.add_argument("--only", action="append", metavar="EXPERIMENT", help="run only this experiment (repeatable)")
    p.add_argument("--experiments", action="append", type=Path, default=[], metavar="DIR",
                   help="also load experiments from this folder (repeatable)")
    p.add_argument("--frameworks", default="pytorch,tensorflow", help="comma-separated subset")
    p.add_argument("--repeats", type=int,
                   help="runs of each configuration, each in a fresh process (default: 1 on quick, 5 otherwise)")
    p.add_argument("--variants", help="comma-separated: fixed and/or variants the experiments define "
                                      "(default: fixed,as_posted; plain runs: --variants fixed)")
    p.add_argument("--ablation", action="store_true",
                   help="also run every pitfall of the chosen variants alone (by default only those a claim names)")
    p.add_argument("--claims", metavar="NAME|FILE|none", default=matrix.DEFAULT_CLAIMS,
                   help="claims to give verdicts on (default seeds: claims/seeds.toml; none for no verdicts)")
    p.add_argument("--backend", choices=("auto", "docker", "local", "ray"), default="auto",
                   help="where runs happen; ray: on the nodes of an existing Ray cluster (--ray-address)")
    p.add_argument("--gpus", default=None,
                   help="none, all, or comma-separated GPU indices or UUIDs (default: all if any)")
    p.add_argument("--parallel", default="1", metavar="auto|N",
                   help="runs at once on this host, one per assigned GPU, each pinned to CPUs near it "
                        "(auto: one per GPU; default 1: one run at a time with every assigned GPU)")
    p.add_argument("--ray-address", metavar="HOST:PORT", help="the Ray cluster's head (with --backend ray)")
    p.add_argument("--ray-runner", choices=("docker", "local"), default="docker",
                   help="the runner each Ray node uses: its Docker engine with the pinned images (default), "
                        "or virtualenvs from the lock files")
    p.add_argument("--python", type=Path, help="run the kits with this interpreter instead of building virtualenvs")
    p.add_argument("--dataset", choices=datasets.DATASETS, help="override the profile's dataset")
    p.add_argument("--data-dir", type=Path, default=STATE / "data", help="dataset cache (default .reprokit/data)")
    p.add_argument("--state-dir", type=Path, default=STATE,
                   help="finished results and scratch space (default .reprokit)")
    p.add_argument("--reports-dir", type=Path, default=REPO / "reports", help="where reports/<name>/ goes")
    p.add_argument("--offline", action="store_true", help="never download; fail early if data is missing")
    p.add_argument("--name", help="report name: reports/<name>/ (default runs/<date>-<profile>-<device>, git-ignored)")
    p.add_argument("--from", dest="from_report", type=Path, metavar="REPORT",
                   help="re-run the exact specs of a report folder (e.g. reports/seeds-quick-cpu) on this machine")
    p.add_argument("--timeout", type=float, help="seconds per run before it is stopped (default by profile)")
    p.add_argument("--max-steps", type=int, help="at most this many training steps per epoch (recorded in the spec; "
                                                 "a script's evaluation passes too)")
    p.add_argument("--script", action="append", metavar="FRAMEWORK=PATH",
                   help="run this script of your own, unmodified, under the probe (repeatable: one per framework); "
                        "the two scripts are then the experiment")
    p.add_argument("--epochs", type=int, help="a script experiment: stop each script after this many epochs")
    p.add_argument("--fresh", action="store_true", help="ignore finished results and run everything again")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan with time estimates and exit; starts nothing, downloads nothing")
    p.add_argument("--no-certify", dest="certify", action="store_false",
                   help="skip the equivalence certificates (the report then says they were skipped)")
    return p


def _print_plan(m: matrix.Matrix, done: set[str], history: list[dict]) -> list[tuple[float | None, str]]:
    """The plan, one line per run with its estimate; returns the estimates of the runs to do."""
    todo = [s for s in m.specs if s["run_id"] not in done]
    estimates = [estimate.seconds(s, history, m.gpu_name) for s in todo]
    builds = [] if m.serving is not None and m.runner.name == "local" else m.runner.missing(
        {s["framework"] for s in todo})      # Ray nodes build their own virtualenvs
    known = [e for e, _ in estimates]
    at_once = max(1, min(m.at_once, len(todo)))
    total = None if None in known else sum(known) / at_once + estimate.ENV_BUILD_S * len(builds)
    where = f"backend {m.runner.name}" if m.serving is None else f"backend ray ({m.runner.name} on the nodes)"
    print(f"\nplan: {len(m.specs)} runs, profile {m.profile} on {m.device}"
          f"{f' ({m.gpu_name})' if m.gpu_name else ''}, {where}"
          f"{f', up to {m.at_once} at once' if m.at_once > 1 else ''}; {len(done)} already finished, "
          f"{len(todo)} to run, estimated {duration(total)}"
          + (f" (including building {', '.join(builds)})" if builds else ""))
    ahead = iter(estimates)
    for i, s in enumerate(m.specs, 1):
        if s["run_id"] in done:
            when = "done"
        else:
            seconds, how = next(ahead)
            when = f"~{duration(seconds)} ({how})"
        run_id = s["run_id"] if s["data"]["sha256"] else "(id once data is prepared)"
        print(f"  {i:>2}. {run_id:<16}  {s['experiment']:<26} {s['framework']:<10} {s['variant']:<28} "
              f"r{s['repeat']}  {when}")
    print()
    return estimates


def _certificates(specs: list[dict], runner, state: Path, enabled: bool, budget: float,
                  budget_why: str) -> dict[str, list[dict]]:
    """Each experiment's equivalence certificates, checked before any timing: one per variant pair
    that runs, on the specs that are timed (their profile, sizes, image or lock), cached by what
    they certify and the trajectory budget (FLOPs, made as ``budget_why`` says), the missing ones made
    together (one process per framework). One that cannot run is recorded with its reason, never left out."""
    entries: list[tuple[str, dict | None, dict | None]] = []        # (experiment, pair, certificate)
    for experiment, pairs in certify_plan.pairs(specs).items():
        for pair in pairs:
            if pair.get("status") == "not-run" or not enabled:
                entries.append((experiment, None, certify_plan.not_run(pair, "skipped with --no-certify")))
                continue
            cached = state / "certificates" / f"{certify_plan.cache_key(pair, budget)}.json"
            entries.append((experiment, pair, json.loads(cached.read_text()) if cached.exists() else None))
    missing = [i for i, (_, _, cert) in enumerate(entries) if cert is None]
    todo = {key: [missing[j] for j in ids]
            for key, ids in certify_plan.by_key([entries[i][1] for i in missing], budget).items()}
    if todo:
        print(f"certificates: {len(todo)} to make for {sum(map(len, todo.values()))} variant pair(s) (same initial "
              f"weights, logits, steps, arithmetic); {len(entries) - sum(map(len, todo.values()))} cached or not run",
              flush=True)
        log = lambda line: print(line, flush=True)      # noqa: E731
        kits = {k: ids for k, ids in todo.items() if not certify_plan.is_script(entries[ids[0]][1])}
        made = dict(zip(kits, certify_many([entries[ids[0]][1] for ids in kits.values()], runner,
                                           [state / "work" / f"cert-{k}" for k in kits], trajectory_budget=budget,
                                           trajectory_budget_why=budget_why, log=log)))
        made |= {k: certify_scripts(entries[ids[0]][1], runner, state / "work" / f"cert-{k}", log=log)
                 for k, ids in todo.items() if k not in kits}
        for key, ids in todo.items():
            cert = made[key]
            write_json_atomic(state / "certificates" / f"{key}.json", cert)
            for i in ids:
                entries[i] = (entries[i][0], entries[i][1], cert)
            print(f"certificate: {cert['experiment']} {' / '.join(cert['variant'].values())}"
                  f"{f' (and {len(ids) - 1} pair(s) it stands for)' if len(ids) > 1 else ''}: {cert['status']}: "
                  f"{cert['summary']}", flush=True)
    out: dict[str, list[dict]] = {}
    for experiment, pair, cert in entries:
        if pair:
            # A cached certificate may be of the same model, data and step under another variant name.
            cert = {**cert, "variant": {fw: pair[fw]["variant"] for fw in FRAMEWORKS},
                    "pitfalls": {fw: pair[fw]["pitfalls"] for fw in FRAMEWORKS}}
        out.setdefault(experiment, []).append(cert)
    return out


def reproduce(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for flag, value in (("--repeats", args.repeats), ("--max-steps", args.max_steps), ("--epochs", args.epochs)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1, got {value}")
    m = matrix.build(args)
    print(f"backend: {m.runner.name} ({m.why})")
    for fw, flavor in sorted(m.flavors.items()):
        print(f"GPU build: {fw} {flavor.name} (CUDA {flavor.cuda}): {flavor.why}")
    state = args.state_dir.resolve()
    store = Store(state / "results")
    done = {s["run_id"] for s in m.specs if not args.fresh and (r := store.get(s["run_id"])) and r["status"] == "ok"}
    todo = [s for s in m.specs if s["run_id"] not in done]
    estimates = _print_plan(m, done, store.all())
    if args.dry_run:
        print("dry run: nothing was started. Run the same command without --dry-run to start it.")
        return 0
    ray_local = m.serving is not None and m.runner.name == "local"
    if todo and not ray_local:                 # Ray nodes build their own virtualenvs
        m.runner.prepare({s["framework"] for s in todo})
    script_requirements.fetch(m.specs, m.runner.data_dir)       # scripts' extra wheels: the one download
    certificates = _certificates(m.specs, m.runner, state, args.certify,
                                 *certify_plan.trajectory_budget(m.device, m.gpu_name))

    def progress_for(i: int, spec: dict) -> RunProgress:
        after = [e for e, _ in estimates[i + 1:]]
        return RunProgress(f"[run {i + 1}/{len(todo)}] {spec['experiment']} / {spec['framework']} / "
                           f"{spec['variant']} r{spec['repeat']}", estimates[i][0],
                           None if None in after else sum(after) / m.at_once)

    if m.serving is not None and todo:
        from reprokit import cluster, node_staging
        data_files = {s["data"]["file"]: args.data_dir.resolve() / s["data"]["file"] for s in todo}
        head, images = cluster.stage_on_head(m.runner, {s["framework"] for s in todo}, data_files,
                                             node_staging.script_files(todo, args.data_dir.resolve()))
        job = cluster.Job(m.runner.name, m.device, head, images, tuple(str(d.resolve()) for d in args.experiments))
        failures, interrupted = cluster.run_all(job, todo, m.serving, store, progress_for)
    elif todo:
        failures, interrupted = schedule.run_all(m.runner, todo, m.slots, state / "work", state / "ledger", store,
                                                 progress_for)
    else:
        failures, interrupted = 0, False
    if interrupted:
        print(f"\ninterrupted: finished results are kept in {store.root}; run the same command again to resume.")
        return 130

    name = args.name or publish.default_name(m.profile, m.device)
    if args.from_report and not args.name:
        name = f"{publish.default_name(m.profile, m.device)}-from-{args.from_report.resolve().name}"
    report_dir = args.reports_dir.resolve() / name
    ran = {s["experiment"] for s in m.specs}
    kept, kept_certs = publish.earlier(report_dir, ran)
    if kept:
        print(f"report: keeping {len(kept)} finished result(s) of "
              f"{', '.join(sorted({r['experiment'] for r in kept}))} from the earlier report of this name")
    path = publish.publish(report_dir, name, [*kept, *(store.get(s["run_id"]) for s in m.specs)], m.experiments,
                           m.claims, {**kept_certs, **certificates})
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
    text = compare.render(compare.compare(compare.load(args.a), compare.load(args.b)), _shown(args.a), _shown(args.b))
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


def prepare_data(argv: list[str]) -> int:
    """reprokit data: the separate data step. CIFAR-10 for every kit, and the posted readers' own formats:
    the archive's batches for torchvision, and TFDS's cifar10 built by TFDS in the TensorFlow environment."""
    from reprokit import envs
    p = argparse.ArgumentParser(prog="reprokit data", description=prepare_data.__doc__)
    p.add_argument("--data-dir", type=Path, default=STATE / "data", help="dataset cache (default .reprokit/data)")
    p.add_argument("--python", type=Path, help="a TensorFlow interpreter with tensorflow-datasets (default: the "
                                               "local TensorFlow environment, built from its lock file)")
    p.add_argument("--offline", action="store_true", help="never download: the archives must be in --data-dir")
    args = p.parse_args(argv)
    data_dir = args.data_dir.resolve()
    request = {"dataset": "cifar10", "train_samples": None, "test_samples": None, "seed": 0}
    print(f"data: {datasets.prepare(request, data_dir, allow_download=not args.offline).file} and "
          f"{datasets.cifar10_batches(data_dir, allow_download=not args.offline).name}/ in {data_dir}")
    python = args.python or envs.build(ENVS, envs.lock_name("tensorflow", "cpu"))
    print(f"data: TFDS's cifar10 in {data_dir / datasets.kitdata.TFDS_CIFAR10} "
          f"(sha256 {datasets.prepare_tfds(data_dir, python)['sha256'][:12]})")
    return 0


VERBS = {"reproduce": reproduce, "compare": compare_sets, "data": prepare_data}


def _terminated(signum, frame):
    """A stop from outside (kill, a CI's timeout) ends as Ctrl-C does: the run in progress stopped with its
    process group, finished results kept; else the kit's process would train on, orphaned."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in VERBS:
        print("usage: reprokit reproduce [options] | reprokit compare A B | reprokit data [options]   "
              "(see reprokit VERB --help)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminated)
    try:
        return VERBS[argv[0]](argv[1:])
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: finished results are kept; run the same command again to resume.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

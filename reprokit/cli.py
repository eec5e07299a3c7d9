"""reprokit reproduce: plan the matrix, run what is not finished, write the report."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

from kits.common.files import write_json_atomic
from reprokit import certify_plan
from reprokit import claims as claimlib
from reprokit import gpu_state, report
from reprokit import plan as planning
from reprokit.certificate import certify
from reprokit.console import RunProgress, duration
from reprokit.errors import UserError
from reprokit.experiments import BUILTIN_DIR, PROFILES, discover
from reprokit.provenance import REPO, code
from reprokit.runners.base import run_spec
from reprokit.runners.choose import choose
from reprokit.store import Store

FRAMEWORKS = ("pytorch", "tensorflow")
LABELS = {"pytorch": "PyTorch", "tensorflow": "TensorFlow"}
STATE = REPO / ".reprokit"
ENVS = STATE / "envs"          # shared by every state dir: an env is a pure function of its lock file
# A priori guesses per run, used until this machine has finished a run of the same kind.
FIRST_GUESS_S = {"quick": 30}
ENV_BUILD_S = 60


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="reprokit reproduce", description=__doc__)
    p.add_argument("--profile", choices=PROFILES,
                   help="quick (CPU-sized), standard (default on a GPU) or full (the seeds' literal length)")
    p.add_argument("--full", action="store_true", help="same as --profile full")
    p.add_argument("--only", action="append", metavar="EXPERIMENT", help="run only this experiment (repeatable)")
    p.add_argument("--experiments", action="append", type=Path, default=[], metavar="DIR",
                   help="also load experiments from this folder (repeatable)")
    p.add_argument("--frameworks", default="pytorch,tensorflow", help="comma-separated subset")
    p.add_argument("--repeats", type=int,
                   help="runs of each configuration, each in a fresh process (default: 1 on quick, 5 otherwise)")
    p.add_argument("--variants", default="fixed",
                   help="comma-separated: fixed and/or variants the experiments define, e.g. fixed,as_posted")
    p.add_argument("--ablation", action="store_true",
                   help="also run each pitfall of the chosen variants alone")
    p.add_argument("--claims", metavar="NAME|FILE",
                   help="run exactly what these claims need (e.g. seeds: claims/seeds.toml) and give verdicts")
    p.add_argument("--backend", choices=("auto", "docker", "local"), default="auto")
    p.add_argument("--gpus", default=None, help="none, all, or comma-separated GPU ids (default: all if any)")
    p.add_argument("--python", type=Path, help="run the kits with this interpreter instead of building virtualenvs")
    p.add_argument("--dataset", choices=("cifar10", "synthetic", "learnable"), help="override the profile's dataset")
    p.add_argument("--data-dir", type=Path, default=STATE / "data", help="dataset cache (default .reprokit/data)")
    p.add_argument("--state-dir", type=Path, default=STATE,
                   help="finished results and scratch space (default .reprokit)")
    p.add_argument("--reports-dir", type=Path, default=REPO / "reports", help="where reports/<name>/ goes")
    p.add_argument("--offline", action="store_true", help="never download; fail early if data is missing")
    p.add_argument("--name", help="report name: reports/<name>/ (default <profile>-<device>)")
    p.add_argument("--timeout", type=float, help="seconds per run before it is stopped (default by profile)")
    p.add_argument("--max-steps", type=int, help="at most this many training steps per epoch (recorded in the spec)")
    p.add_argument("--fresh", action="store_true", help="ignore finished results and run everything again")
    p.add_argument("--no-certify", dest="certify", action="store_false",
                   help="skip the equivalence certificate (same weights, logits, ten steps) before the runs")
    return p


def _host_has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and os.system("nvidia-smi -L >/dev/null 2>&1") == 0


def _estimate(store_results: list[dict], spec: dict) -> float | None:
    """The median wall time of finished runs like this one (same variant if any, else any variant)."""
    def walls(keys: tuple[str, ...]) -> list[float]:
        return [r["launcher"]["wall_s"] for r in store_results
                if r["status"] == "ok" and r.get("launcher", {}).get("wall_s")
                and all(r[k] == spec[k] for k in keys)]
    same = walls(("experiment", "framework", "variant", "profile")) or walls(("experiment", "framework", "profile"))
    return statistics.median(same) if same else FIRST_GUESS_S.get(spec["profile"])


def _choose_runner(args, device: str, data_dir: Path, extra: tuple[Path, ...], frameworks: set[str],
                   gpus_explicit: bool):
    return choose(backend=args.backend, python=args.python, gpus=args.gpus, gpus_explicit=gpus_explicit,
                  device=device, repo_root=REPO, envs_root=ENVS, data_dir=data_dir, extra_dirs=extra,
                  frameworks=frameworks)


def _experiments(args, frameworks: tuple[str, ...]) -> tuple[dict, tuple[Path, ...]]:
    unknown = set(frameworks) - {"pytorch", "tensorflow"}
    if unknown or not frameworks:
        raise UserError(f"--frameworks: unknown {', '.join(sorted(unknown)) or '(empty)'}; allowed: pytorch, tensorflow")
    extra_dirs = tuple(d.resolve() for d in args.experiments)
    experiments = discover([BUILTIN_DIR, *extra_dirs])
    if args.only:
        missing = set(args.only) - set(experiments)
        if missing:
            raise UserError(f"--only: no experiment named {', '.join(sorted(missing))}; "
                            f"known: {', '.join(sorted(experiments))}")
        experiments = {k: v for k, v in experiments.items() if k in args.only}
    return experiments, extra_dirs


def _print_plan(specs: list[dict], done: set[str], history: list[dict], header: str, to_build: list[str]) -> None:
    todo = [s for s in specs if s["run_id"] not in done]
    estimates = [_estimate(history, s) for s in todo]
    total = None if None in estimates else sum(estimates) + ENV_BUILD_S * len(to_build)
    print(f"\nplan: {len(specs)} runs, {header}; {len(done)} already finished, {len(todo)} to run, "
          f"estimated {duration(total)}" + (f" (including building {', '.join(to_build)})" if to_build else ""))
    for i, s in enumerate(specs, 1):
        when = "done" if s["run_id"] in done else f"~{duration(_estimate(history, s))}"
        print(f"  {i:>2}. {s['run_id']}  {s['experiment']:<28} {s['framework']:<10} {s['variant']:<26} "
              f"repeat {s['repeat']}  {when}")
    print()


def _run_one(runner, spec: dict, work: Path, label: str) -> dict | None:
    """One run to one result (None when interrupted); the GPU's state is read on the host around it."""
    progress = RunProgress(label)
    before = gpu_state.snapshot() if spec["device"] == "gpu" else None
    result = run_spec(runner, spec, work, progress)
    if result is None:
        return None
    if spec["device"] == "gpu":
        after = gpu_state.snapshot()
        result.setdefault("launcher", {})["gpu_state"] = {"before": before, "after": after}
        if result["status"] == "ok":
            result["findings"] += gpu_state.findings(before, after, result)
    progress.done(result["status"] if result["status"] == "ok"
                  else f"FAILED ({result['failure']['kind']}: {result['failure']['message']})")
    return result


def _certificates(specs: list[dict], runner, state: Path, enabled: bool) -> dict[str, list[dict]]:
    """Each experiment's equivalence certificates, checked before any timing: one per variant pair
    that runs, on the specs that are timed (their profile, sizes, image or lock), cached by what
    they certify. One that cannot run is recorded with its reason, never left out."""
    out: dict[str, list[dict]] = {}
    for experiment, pairs in certify_plan.pairs(specs).items():
        for pair in pairs:
            if not enabled:
                pair = certify_plan.not_run(pair, "skipped with --no-certify")
            if pair.get("status") == "not-run":
                out.setdefault(experiment, []).append(pair)
                continue
            key = certify_plan.cache_key(pair)
            cached = state / "certificates" / f"{key}.json"
            if cached.exists():
                # The same model, data and step under another variant name: relabelled, not repeated.
                cert = {**json.loads(cached.read_text()), "variant": {fw: pair[fw]["variant"] for fw in FRAMEWORKS},
                        "pitfalls": {fw: pair[fw]["pitfalls"] for fw in FRAMEWORKS}}
            else:
                what = " vs ".join(f"{LABELS[fw]} {pair[fw]['variant']}" for fw in FRAMEWORKS)
                print(f"certificate: {experiment}: {what} (same initial weights, logits, ten steps, FLOPs)", flush=True)
                cert = certify(pair, runner, state / "work" / f"cert-{key}")
                write_json_atomic(cached, cert)
                print(f"certificate: {experiment}: {cert['status']}: {cert['summary']}", flush=True)
            out.setdefault(experiment, []).append(cert)
    return out


def _publish(report_dir: Path, name: str, results: list[dict], experiments: dict, claims,
             certificates: dict) -> Path:
    """The report and a copy of every result it is computed from, replacing the previous ones."""
    (report_dir / "results").mkdir(parents=True, exist_ok=True)
    for old in (report_dir / "results").glob("*.json"):
        old.unlink()
    copies = Store(report_dir / "results")
    for r in results:
        copies.put(r)
    for old in report_dir.glob("certificate-*.json"):
        old.unlink()
    for certs in certificates.values():
        for cert in certs:
            write_json_atomic(report_dir / certify_plan.file_name(cert), cert)
    return report.write(report_dir, name, results, experiments, claims=claims, certificates=certificates)


def reproduce(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for flag, value in (("--repeats", args.repeats), ("--max-steps", args.max_steps)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1, got {value}")
    frameworks = tuple(f.strip() for f in args.frameworks.split(",") if f.strip())
    experiments, extra_dirs = _experiments(args, frameworks)

    gpus_explicit = args.gpus is not None
    args.gpus = args.gpus or ("all" if _host_has_gpu() else "none")
    device = "cpu" if args.gpus == "none" else "gpu"
    profile = "full" if args.full else args.profile or ("standard" if device == "gpu" else "quick")
    needed = {f for e in experiments.values() for f in e.frameworks if f in frameworks}

    runner, reason = _choose_runner(args, device, args.data_dir.resolve(), extra_dirs, needed, gpus_explicit)
    print(f"backend: {runner.name} ({reason})")
    opts = planning.Options(profile=profile, device=device, repeats=args.repeats or (1 if profile == "quick" else 5),
                            frameworks=frameworks, data_dir=args.data_dir.resolve(), allow_download=not args.offline,
                            dataset=args.dataset, timeout_s=args.timeout,
                            variants=tuple(v.strip() for v in args.variants.split(",") if v.strip()),
                            ablation=args.ablation, max_steps=args.max_steps)
    loaded = claimlib.load(args.claims) if args.claims else None
    per_experiment = {name: opts for name in experiments}
    if loaded is not None:
        claimlib.check_against(loaded, experiments)
        # Every pitfall alone too: the report's ablation table shows which mistake cost what.
        per_experiment = {name: dataclasses.replace(opts, variants=tuple(sorted(need["variants"])), ablation=True)
                          for name, need in claimlib.needs(loaded, experiments).items() if name in experiments}
    specs = [s for name, o in per_experiment.items()
             for s in planning.specs_for(experiments[name], o, runner.describe, code(extra_dirs))]

    state = args.state_dir.resolve()
    store = Store(state / "results")
    done = {s["run_id"] for s in specs if not args.fresh and (r := store.get(s["run_id"])) and r["status"] == "ok"}
    todo = [s for s in specs if s["run_id"] not in done]
    _print_plan(specs, done, store.all(), f"profile {profile} on {device}, backend {runner.name}", runner.missing(needed))
    if todo:
        runner.prepare(needed)
    certificates = _certificates(specs, runner, state, args.certify)
    failures = 0
    for i, spec in enumerate(todo, 1):
        label = f"[run {i}/{len(todo)}] {spec['experiment']} / {spec['framework']} / {spec['variant']} r{spec['repeat']}"
        result = _run_one(runner, spec, state / "work", label)
        if result is None:
            print(f"\ninterrupted: finished results are kept in {store.root}; run the same command again to resume.")
            return 130
        store.put(result)
        failures += result["status"] != "ok"

    name = args.name or f"{profile}-{device}"
    path = _publish(args.reports_dir.resolve() / name, name, [store.get(s["run_id"]) for s in specs], experiments,
                    loaded, certificates)
    print(f"\nreport: {_shown(path)}" + (f"  ({failures} run(s) failed: see the report)" if failures else ""))
    return 1 if failures else 0


def _shown(path: Path) -> str:
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "reproduce":
        print("usage: reprokit reproduce [options]   (see reprokit reproduce --help)", file=sys.stderr)
        return 2
    try:
        return reproduce(argv[1:])
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: finished results are kept; run the same command again to resume.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""What the kit costs: its throughput against bare loops, the local runner's overhead, report rendering.

    PYTHONPATH=. python benchmarks/bench_kit_overhead.py [--min-rounds 6] [--max-rounds 15] [--per-process 5]
        [--target 0.02] [--warmup 5] [--steps 40] [--frameworks pytorch,tensorflow]
        [--skip throughput,overhead,render] [--small] [--devices N] [--json OUT]

Every (experiment, framework) pair whose kit can run it is measured; each one it cannot is named with the kit's
reason (the plan asks its limits, reprokit/kits/<kit>/limits.py, as a real run would), and so is a kit with no bare
loop. ``--small``, the form tests/test_bench_small.py runs: every part once, on the first framework's cheapest model
(training FLOPs per step), one round of 3 timed steps, one overhead run, a report of 50 files; printed, not judged.

1. Throughput, judged per (experiment, framework) pair. In each framework's
   real environment (``python -m reprokit.kits.bench``, started through the local
   runner like every kit process), four sides take turns on the quick
   profile's model of each seed experiment, on this machine's CPU: the kit
   with all its instrumentation, the kit with its per-step timing off, and
   twice a bare loop (reprokit/kits/bench.py: the fastest idiomatic loop of the
   same model, data, optimizer, batch size and threads; its batches are on the
   device before its clock starts, and TensorFlow's step is a tf.function).
   Rounds take balanced blocks of four orders (every side in every place once,
   after each other side once). They run in fresh processes of 5 rounds each
   (after a dropped warm-up round in each), since one process keeps its own
   bias for all its rounds; the processes' rounds are pooled until the 95%
   intervals of both gated median ratios (kit/bare and bare/bare again) are
   within +-2% of their medians, or 15 rounds ran (at least 6: two
   processes); a model whose kit/bare interval still holds the 0.97 gate
   then, undecided, goes on to 30 rounds. The interval is the distribution-free one of a median from
   order statistics: [x_(k), x_(n+1-k)] with the binomial coverage it has
   (printed; reprokit/results/stats.py, as in the reports). Gates per pair:
   the median kit/bare at least 0.97 (goal 0.99, printed); the kit not beating
   its bare loop beyond the interval (the interval's low end above 1 means the
   reference is not the fastest loop); and the bench's null check, the bare
   loop against itself, whose interval must cover 1: one that does not means
   the bench made up a difference (a process's bias, order, a burst of other
   work), and no ratio of that pair holds to its interval's width. Step
   timing on/off, the kit against itself but for its step clock, is printed
   with its interval as what the clock costs: a reading, since the kit/bare
   gate already holds the kit with its clock. On a GPU each window edge drains
   the queue; on this 2-core CPU a JAX step's edge wakes the waiting host
   thread while XLA's threads hold both cores (docs/benchmarks.md). The spread
   of each side over rounds is printed.
2. Local runner overhead. A run with almost no training (1 epoch of 2 steps)
   through reprokit.runners.base.run_spec, several times per framework: the time
   from just before the process is launched to the result collected, minus the
   kit's timing.wall_s, which counts from the process's start (interpreter start
   and imports included; reprokit/kits/framework_free/measure.process_age_s). What is left is
   the launch, what the kit does after its measurements (the CPU's matmul
   peak, read from its cache after the first run; findings; writing the
   result; exit) and the host's collect (reading and checking the result).
   The first run is dropped: it warms the page cache and, where the cache is
   empty, measures the CPU peak (its overhead is printed). Fails at 0.3 s or more.
   ``--devices N`` runs part 1 at N devices (the specs' ``devices``, the global batch held): the kit's own runs at
   N (reprokit/kits/training_loop/distributed.py) against a bare DDP loop under torchrun, a bare MirroredStrategy
   loop and a bare sharded JAX step (each kit's bare.py). On a CPU the N devices are stand-ins that share its
   cores, so those ratios are a reading, printed, not a gate.
3. Report rendering. 1,000 result files (copies of the reference results in
   reports/quick-cpu/results/ and of a real sweep at 1 and 2 devices in
   tests/fixtures/sweep/, so the report has its scaling section, with distinct
   run ids and repeats, each valid against the schema) in a temporary folder: the time to load and validate
   them and to write the report with reprokit.report, 5 times, each in a fresh
   process (its imports done before the clock, matplotlib's not), as a user's
   command writes it. Fails when their median is above 2 s.

Exit status: 0 when every gate holds (--small: whatever they say), 1 when one misses, 2 on a setup error.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from reprokit import report
from reprokit.environments.envs import ENVS
from reprokit.errors import UserError
from reprokit.execute import data_step
from reprokit.kits.contract.names import FRAMEWORKS, REGISTRY
from reprokit.kits.contract.spec import RunSpec
from reprokit.places import DATA
from reprokit.plan import model_cost, plan
from reprokit.plan.experiments import BUILTIN_DIR, discover
from reprokit.results import stats
from reprokit.results.provenance import code
from reprokit.results.store import Store
from reprokit.runners.base import run_spec
from reprokit.runners.kit_bench import pair_summary, throughput
from reprokit.runners.local import LocalRunner

TARGET = 0.02             # rounds go on until both median ratios' intervals are within +-TARGET ...
MAX_ROUNDS = 15           # ... or this many ran,
UNDECIDED_ROUNDS = 30     # ... or, where kit/bare's interval still holds its gate, this many,
PER_PROCESS = 5           # in fresh processes of this many rounds each
MAX_OVERHEAD_S = 0.3      # local runner: process launch to result collected, minus the kit's timing.wall_s
MAX_RENDER_S = 2.0        # load + validate + write a report of 1,000 result files
RENDER_FILES = 1000
RENDER_ROUNDS = 5         # each in a fresh process; the gate holds their median
SMALL = {"min_rounds": 1, "max_rounds": 1, "undecided_rounds": 1, "per_process": 1, "warmup": 1, "steps": 3,
         "overhead_runs": 1}
SMALL_RENDER_FILES = 50   # --small: every part once, at a size that only shows it runs (SMALL overrides options)
NOISY = 0.05              # spread of one side's samples/s over rounds above which the machine was noisy
# the reference results, and a real sweep at 1 and 2 devices (the torchrun DDP corpus script and Keras fit under
# MirroredStrategy on stand-in devices), so the report has its scaling section and plot
REFERENCE_RESULTS = (REPO / "reports" / "quick-cpu" / "results", REPO / "tests" / "fixtures" / "sweep")
PARTS = ("throughput", "overhead", "render")


def log(line: str = "") -> None:
    print(line, flush=True)


def quick_specs(frameworks: list[str], data_dir: Path, runner: LocalRunner) -> tuple[dict[str, list], list[str]]:
    """The fixed quick-profile RunSpecs of every built-in experiment on the CPU, by framework, for each pair the
    framework's kit can run; and one line for each pair it cannot, with the kit's reason."""
    opts = plan.Options("quick", "cpu", repeats=1, frameworks=(),
                        data=data_step.Preparing(data_dir, allow_download=False))
    specs: dict[str, list[RunSpec]] = {fw: [] for fw in frameworks}
    left_out = [f"{fw}: no kit/bare ratio: its kit has no bare loop ({REGISTRY[fw].package}.bare)"
                for fw in frameworks if not REGISTRY[fw].has("bare")]
    for e in discover([BUILTIN_DIR]).values():
        plan.specs_for(e, opts, runner.describe, code())          # its data step alone: a failure there is the bench's
        for fw in frameworks:
            try:          # with the data prepared, what is refused here is the kit's: its builders and its limits
                looked = dataclasses.replace(opts, frameworks=(fw,), data=data_step.LookedUp(data_dir))
                planned = plan.specs_for(e, looked, runner.describe, code())
            except UserError as exc:
                left_out.append(f"{fw} {e.name}: not measured: {str(exc).removeprefix(f'{e.path}: ')}")
                continue
            specs[fw] += [s for s in planned if s.variant == "fixed"]
    return specs, left_out


def cheapest(specs: list[RunSpec]) -> RunSpec:
    """--small's model: the one whose training step costs the fewest FLOPs (a custom model's count is unknown)."""
    return min(specs, key=lambda s: (model_cost.training_flops_per_sample(s.to_dict()["model"], s.data.input_size)
                                     or math.inf) * s.train.batch_size)


# --- 1. throughput: reprokit.kits.bench through the runner, pooled until settled (reprokit/runners/kit_bench.py) ---


# --- 2. local runner overhead -----------------------------------------------------------------

def tiny(spec: RunSpec) -> RunSpec:
    """A spec whose training is next to nothing: one epoch of 2 steps, a 64-sample evaluation."""
    return plan.identified(dataclasses.replace(
        spec, train=dataclasses.replace(spec.train, epochs=1, max_steps_per_epoch=2, warmup_steps=1),
        data=dataclasses.replace(spec.data, test_samples=min(spec.data.test_samples, 64))))


def runner_overhead(framework: str, runner: LocalRunner, spec: RunSpec, work: Path, runs: int) -> dict:
    """The local runner's cost per run: process launch to result collected, minus the kit's timing.wall_s
    (which counts from the process's start: interpreter start and imports are the kit's own time)."""
    spec = tiny(spec)
    rows = []
    for _ in range(runs + 1):          # run 0 warms the page cache (and the CPU peak's cache where empty): dropped
        t0 = time.perf_counter()
        result = run_spec(runner, spec, work / f"overhead-{framework}", lambda e: None)
        total = time.perf_counter() - t0
        if result["status"] != "ok":
            raise RuntimeError(f"{framework}: the overhead run failed: {result['failure']}")
        t = result["timing"]
        training = sum(e["train_s"] + e["eval_s"] for e in t["epochs"])
        rows.append({"total": total, "process": result["launcher"]["wall_s"], "kit_wall": t["wall_s"],
                     "kit_setup": t["wall_s"] - training, "overhead": total - t["wall_s"],
                     "peak": result["environment"].get("matmul_peak_source", "not read")})
    first, rows = rows[0], rows[1:]
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "peak"}
    over = sorted(r["overhead"] for r in rows)
    peaks = sorted({r["peak"].split(":")[0] for r in rows})
    log(f"  {framework:<10} process launch -> result collected {med['total']:.2f} s; kit timing.wall_s "
        f"{med['kit_wall']:.2f} s (of which interpreter start, imports, data load, model build "
        f"{med['kit_setup']:.2f} s); "
        f"runner overhead median {med['overhead']:.2f} s (min {over[0]:.2f}, max {over[-1]:.2f}, {runs} runs): "
        f"after the kit's measurements (CPU peak, findings, result written, exit) "
        f"{med['process'] - med['kit_wall']:.2f} s, launch and collect (spawn, schema check) "
        f"{med['total'] - med['process']:.2f} s; CPU peak {', '.join(peaks)}; "
        f"dropped first run {first['overhead']:.2f} s (CPU peak {first['peak'].split(':')[0]})")
    return {"framework": framework, "runs": rows, "first": first, "median": med}


# --- 3. report rendering ----------------------------------------------------------------------

def fan_out(sources: list[dict], n: int, folder: Path) -> None:
    """n schema-valid result files: the sources again and again, each copy its own run id and repeat."""
    store = Store(folder)
    for i in range(n):
        r = copy.deepcopy(sources[i % len(sources)])
        repeat = i // len(sources)
        r["repeat"] = r["spec"]["repeat"] = repeat
        r["spec"].pop("run_id", None)
        r["run_id"] = r["spec"]["run_id"] = hashlib.sha256(
            f"{r['run_id']}/{repeat}".encode()).hexdigest()[:16]
        store.put(r)


def render_time(work: Path, sources: list[dict], files: int, rounds: int) -> dict:
    """The report of ``files`` results, written ``rounds`` times, each in a fresh process as a user's command
    writes it (its imports done, matplotlib's not); judged on the median."""
    folder = work / "render"
    fan_out(sources, files, folder / "results")
    runs = []
    for i in range(rounds):
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as fresh:
            r = fresh.submit(render_once, folder).result()
        log(f"  round {i + 1}: {r['files']} result files: load + validate {r['load_validate_s']:.2f} s, render + "
            f"write (with plots) {r['render_write_s']:.2f} s, total {r['total_s']:.2f} s (CPU {r['cpu_s']:.2f} s, "
            f"of which {r['workers_cpu_s']:.2f} s in its figures' workers); report.md {r['report_kib']:.0f} KiB")
        runs.append(r)
    totals = [r["total_s"] for r in runs]
    log(f"  total: median {statistics.median(totals):.2f} s, {min(totals):.2f}-{max(totals):.2f} s over {rounds} "
        f"processes (target < {MAX_RENDER_S:.0f} s)")
    return {"files": files, "rounds": runs, "total_s": statistics.median(totals)}


def render_once(folder: Path) -> dict:
    experiments = discover([BUILTIN_DIR])
    c0, t0 = time.process_time(), time.perf_counter()
    results = Store(folder / "results").all()                 # read + validate every file
    t1 = time.perf_counter()
    path = report.write(folder, "bench", results, experiments)
    t2 = time.perf_counter()
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)   # this fresh process's only children
    workers_cpu = workers.ru_utime + workers.ru_stime
    return {"files": len(results), "load_validate_s": t1 - t0, "render_write_s": t2 - t1, "total_s": t2 - t0,
            "cpu_s": time.process_time() - c0 + workers_cpu, "workers_cpu_s": workers_cpu,
            "report_kib": path.stat().st_size / 1024}


def reference_results() -> list[dict]:
    results = []
    for folder in REFERENCE_RESULTS:
        found = [r for r in Store(folder).readable()[0] if r["status"] == "ok"]
        if not found:
            raise UserError(f"{folder} holds no finished result to copy")
        results += found
    return results


def gates(out: dict) -> list[str]:
    """Every part's gates, printed; the misses returned (at N stand-in devices the throughput's are a reading)."""
    misses: list[str] = []
    noisy = False
    for models in out.get("throughput", {}).values():
        for m in models:
            missed = pair_summary(m)
            misses += missed if out["devices"] == 1 else []
            noisy = noisy or max(m["spread"].values()) > NOISY
    if out["devices"] > 1 and out.get("throughput"):
        log(f"  at {out['devices']} stand-in devices, which share this machine's CPUs, kit/bare is a reading, not a "
            f"gate")
    for fw, o in out.get("overhead", {}).items():
        cost = o["median"]["overhead"]
        log(f"  {fw:<10} local runner overhead per run {cost:.2f} s (median); gate < {MAX_OVERHEAD_S} s: "
            f"{'ok' if cost < MAX_OVERHEAD_S else 'MISSED'}")
        if cost >= MAX_OVERHEAD_S:
            misses.append(f"{fw} local runner overhead {cost:.2f} s >= {MAX_OVERHEAD_S} s")
    if "render" in out:
        r = out["render"]
        verdict = "ok" if r["total_s"] <= MAX_RENDER_S else "MISSED"
        log(f"  report of {r['files']:,} results: {r['total_s']:.2f} s (median); gate <= {MAX_RENDER_S:.0f} s: "
            f"{verdict}")
        if r["total_s"] > MAX_RENDER_S:
            misses.append(f"render {r['total_s']:.2f} s > {MAX_RENDER_S} s")
    for line in out["left_out"]:
        log(f"  {line}")
    load = out["machine"]
    busy = max(load["load_before"][0], load["load_after"][0]) > load["cpus"]
    if busy or noisy:
        why = ("other work shared the CPU, so these figures are not the kit's alone; run again on a quiet machine"
               if busy else "with no other load, that is this machine's own timing noise, carried by the intervals")
        log(f"  note: load average {load['load_before'][0]:.1f} before, {load['load_after'][0]:.1f} after on "
            f"{load['cpus']} cores{'; rounds spread over ' + format(NOISY, '.0%') if noisy else ''}: {why}")
    return misses


# --- main -------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-rounds", type=int, default=6, help="rounds per model before the intervals may stop them")
    ap.add_argument("--max-rounds", type=int, default=MAX_ROUNDS, help="rounds per model at most")
    ap.add_argument("--undecided-rounds", type=int, default=UNDECIDED_ROUNDS,
                    help="rounds at most for a model whose kit/bare interval still holds the gate after --max-rounds")
    ap.add_argument("--per-process", type=int, default=PER_PROCESS, help="rounds per reprokit.kits.bench process")
    ap.add_argument("--target", type=float, default=TARGET, help="stop once the median ratios' intervals are "
                                                                    "within +-this")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps per side and round")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per side and round (over several epochs "
                                                                  "where one is shorter)")
    ap.add_argument("--overhead-runs", type=int, default=3, help="local runner runs per framework (after one dropped)")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--skip", default="", help=f"comma-separated parts to skip: {', '.join(PARTS)}")
    ap.add_argument("--data-dir", type=Path, default=DATA)
    ap.add_argument("--small", action="store_true", help="every part once, on the first framework's cheapest model, "
                                                         "printed and not judged (the test suite's form)")
    ap.add_argument("--devices", type=int, default=1, help="part 1 at this many devices (stand-ins on a CPU): the "
                                                           "kits' data-parallel runs against bare loops at N")
    ap.add_argument("--json", type=Path, help="also write every measured value here")
    args = ap.parse_args(argv)
    if args.small:
        vars(args).update(SMALL)
    frameworks = [f for f in args.frameworks.split(",") if f][:1 if args.small else None]
    skip = {p for p in args.skip.split(",") if p}
    if set(frameworks) - set(FRAMEWORKS) or skip - set(PARTS):
        log(f"error: frameworks are {', '.join(FRAMEWORKS)}; parts are {', '.join(PARTS)}")
        return 2
    data_dir = args.data_dir.resolve()
    work = Path(tempfile.mkdtemp(prefix="reprokit-bench-"))
    out: dict = {"machine": {"cpus": len(os.sched_getaffinity(0)), "load_before": os.getloadavg()},
                 "devices": args.devices}
    if not 1 <= args.devices <= out["machine"]["cpus"]:
        log(f"error: --devices {args.devices}: this machine lets the bench use {out['machine']['cpus']} CPUs, one per "
            f"stand-in device at most")
        return 2
    t_start = time.perf_counter()
    try:
        runner = LocalRunner(ENVS, data_dir, "cpu")
        runner.prepare(set(frameworks), log=log)
        specs, out["left_out"] = quick_specs(frameworks, data_dir, runner)
        if args.small:
            specs = {fw: [cheapest(found)] for fw, found in specs.items() if found}
        if args.devices > 1:
            specs = {fw: [plan.identified(dataclasses.replace(s, devices=args.devices)) for s in found
                          if s.train.batch_size % args.devices == 0] for fw, found in specs.items()}

        if "throughput" not in skip:
            at = f" at {args.devices} stand-in devices" if args.devices > 1 else ""
            log(f"\n== 1. kit vs bare loop, quick-profile models{at} on the CPU ({out['machine']['cpus']} cores): "
                f"kit, kit without step timing, bare loop and bare loop again in turn, in balanced orders, "
                f"{args.warmup} warmup + {args.steps} timed steps per side (in whole epochs of one length where "
                f"one is shorter); fresh processes of {args.per_process} rounds (each after a dropped warm-up round), "
                f"pooled until the {stats.LEVEL:.0%} intervals of kit/bare and of bare/bare again are "
                f"within +-{args.target:.0%} ({args.min_rounds} rounds at least, {args.max_rounds} at most, or "
                f"{args.undecided_rounds} where kit/bare's interval still holds its gate)")
            out["throughput"] = {fw: throughput(fw, runner, specs[fw], work, args)
                                 for fw in specs if REGISTRY[fw].has("bare")}
        if "overhead" not in skip:
            log(f"\n== 2. local runner overhead per run (process launch to result collected, minus the kit's "
                f"timing.wall_s), median of {args.overhead_runs}")
            out["overhead"] = {fw: runner_overhead(fw, runner, found[0], work, args.overhead_runs)
                               for fw, found in specs.items() if found}
        if "render" not in skip:
            files, rounds = (SMALL_RENDER_FILES, 1) if args.small else (RENDER_FILES, RENDER_ROUNDS)
            log(f"\n== 3. report from {files:,} result files, {rounds} time(s), each in a fresh process")
            out["render"] = render_time(work, reference_results(), files, rounds)
    except (UserError, RuntimeError) as exc:
        log(f"error: {exc}")
        return 2
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["machine"]["load_after"] = os.getloadavg()

    log(f"\n== summary ({time.perf_counter() - t_start:.0f} s)")
    misses = gates(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    if misses and not args.small:
        log("FAILED: " + "; ".join(misses))
        return 1
    log(f"small form: every part ran; its figures are not judged ({len(misses)} gate(s) miss at this size)"
        if args.small else "all gates hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())

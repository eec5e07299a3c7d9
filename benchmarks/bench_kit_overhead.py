"""What the kit costs: its throughput against bare loops, the local runner's overhead, report rendering.

    PYTHONPATH=. python benchmarks/bench_kit_overhead.py [--rounds 6] [--warmup 5] [--steps 40]
        [--frameworks pytorch,tensorflow] [--skip throughput,overhead,render] [--json OUT]

1. Throughput. For each framework, in that framework's real environment and
   in ONE process (``python -m kits.bench``, started through the local runner like every kit process),
   the kit with all its
   instrumentation, the kit with its per-step timing off, and a bare loop of the
   same model, data, optimizer and batch size alternate over several rounds, on
   the quick profile's models of both seed experiments, on this machine's CPU.
   Prints the median of the pairwise ratios kit/bare, and fails when a
   framework's median is below 0.97; and the median of the ratios timing
   on/off, and fails when it is more than 2% from 1.
2. Local runner overhead. A run with almost no training (1 epoch of 2 steps)
   through reprokit.runners.base.run_spec, several times per framework: the time
   from just before the process starts to the result collected, minus the
   kit's own timing.wall_s (which starts once kits.run is imported). Reported,
   not gated.
3. Report rendering. 1,000 result files (copies of the reference results in
   reports/quick-cpu/results/ with distinct run ids and repeats, each valid
   against the schema) in a temporary folder: the time to load and validate
   them and to write the report with reprokit.report. Fails above 2 s.

Exit status: 0 when every gate holds, 1 when one misses, 2 on a setup error.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kits.common.names import FRAMEWORKS
from reprokit import plan, report
from reprokit.envs import ENVS, STATE
from reprokit.errors import UserError
from reprokit.experiments import BUILTIN_DIR, discover
from reprokit.provenance import code
from reprokit.runners.base import KitCall, run_spec
from reprokit.runners.local import LocalRunner
from reprokit.store import Store

MIN_RATIO = 0.97          # kit throughput / bare-loop throughput, median over rounds, per framework
MAX_TIMING_EFFECT = 0.02  # |kit with step timing / kit without - 1|, median over rounds, per framework
MAX_RENDER_S = 2.0        # load + validate + write a report of 1,000 result files
RENDER_FILES = 1000
NOISY = 0.05              # spread of one side's samples/s over rounds above which the machine was busy
REFERENCE_RESULTS = REPO / "reports" / "quick-cpu" / "results"
PARTS = ("throughput", "overhead", "render")


def log(line: str = "") -> None:
    print(line, flush=True)


def quick_specs(framework: str, data_dir: Path, runner: LocalRunner) -> list[dict]:
    """The fixed quick-profile RunSpecs of every built-in experiment, on the CPU, for one framework."""
    opts = plan.Options(profile="quick", device="cpu", repeats=1, frameworks=(framework,), data_dir=data_dir,
                        allow_download=False)
    experiments = discover([BUILTIN_DIR])
    return [s for e in experiments.values() for s in plan.specs_for(e, opts, runner.describe, code())
            if s["variant"] == "fixed"]


# --- 1. throughput ----------------------------------------------------------------------------

def throughput(framework: str, runner: LocalRunner, specs: list[dict], work: Path,
               rounds: int, warmup: int, steps: int) -> list[dict]:
    """kits.bench in the framework's environment, through the runner; its per-round lines are shown as they come."""
    spec_path, out = work / f"specs-{framework}.json", work / f"throughput-{framework}"
    spec_path.write_text(json.dumps(specs))
    call = KitCall(framework, "kits.bench", ("--specs", spec_path, "--data-dir", runner.data_dir,
                                             "--rounds", str(rounds), "--warmup", str(warmup), "--steps", str(steps),
                                             "--out", out / "throughput.json"),
                   output=out, inputs=(spec_path,), timeout_s=3600, label=f"bench-{framework}")
    outcome = runner.run(call, lambda event: "bench" in event and log(event["bench"]))
    if outcome.exit_code != 0:
        raise RuntimeError(f"{framework}: kits.bench ended with {outcome.exit_code}:\n" + "\n".join(outcome.log_tail))
    return json.loads((out / "throughput.json").read_text())


# --- 2. local runner overhead -----------------------------------------------------------------

def tiny(spec: dict) -> dict:
    """A spec whose training is next to nothing: one epoch of 2 steps, a 64-sample evaluation."""
    s = copy.deepcopy(spec)
    s["train"].update(epochs=1, max_steps_per_epoch=2, warmup_steps=1)
    s["data"]["test_samples"] = min(s["data"]["test_samples"], 64)
    s["run_id"] = plan.run_id(s)
    return s


def runner_overhead(framework: str, runner: LocalRunner, spec: dict, work: Path, runs: int) -> dict:
    spec = tiny(spec)
    rows, kept = [], None
    for i in range(runs + 1):          # run 0 warms the page cache: dropped
        t0 = time.perf_counter()
        result = run_spec(runner, spec, work / f"overhead-{framework}", lambda e: None)
        total = time.perf_counter() - t0
        if result["status"] != "ok":
            raise RuntimeError(f"{framework}: the overhead run failed: {result['failure']}")
        t = result["timing"]
        training = sum(e["train_s"] + e["eval_s"] for e in t["epochs"])
        if i:
            rows.append({"total": total, "process": result["launcher"]["wall_s"], "kit_wall": t["wall_s"],
                         "kit_setup": t["wall_s"] - training, "overhead": total - t["wall_s"]})
        kept = result
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    over = sorted(r["overhead"] for r in rows)
    log(f"  {framework:<10} process start -> result collected {med['total']:.2f} s; kit timing.wall_s "
        f"{med['kit_wall']:.2f} s (of which framework import, data load, model build {med['kit_setup']:.2f} s); "
        f"runner overhead median {med['overhead']:.2f} s (min {over[0]:.2f}, max {over[-1]:.2f}, {runs} runs): "
        f"interpreter start, kits.run imports and exit {med['process'] - med['kit_wall']:.2f} s, "
        f"launch and collect {med['total'] - med['process']:.2f} s")
    return {"framework": framework, "runs": rows, "median": med, "result": kept}


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


def render_time(work: Path, sources: list[dict]) -> dict:
    folder = work / "render"
    fan_out(sources, RENDER_FILES, folder / "results")
    experiments = discover([BUILTIN_DIR])
    t0, c0 = time.perf_counter(), time.process_time()
    results = Store(folder / "results").all()                 # read + validate every file
    t1, c1 = time.perf_counter(), time.process_time()
    path = report.write(folder, "bench", results, experiments)
    t2, c2 = time.perf_counter(), time.process_time()
    size = path.stat().st_size
    log(f"  {len(results)} result files: load + validate {t1 - t0:.2f} s, render + write (with plots) "
        f"{t2 - t1:.2f} s, total {t2 - t0:.2f} s (CPU {c1 - c0:.2f} + {c2 - c1:.2f} s; target < {MAX_RENDER_S:.0f} s); "
        f"report.md {size / 1024:.0f} KiB")
    return {"files": len(results), "load_validate_s": t1 - t0, "render_write_s": t2 - t1, "total_s": t2 - t0,
            "cpu_s": c2 - c0}


def reference_results() -> list[dict]:
    store = Store(REFERENCE_RESULTS)
    results = [r for r in store.all() if r["status"] == "ok"]
    if not results:
        raise UserError(f"{REFERENCE_RESULTS} holds no finished result to copy")
    return results


# --- main -------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6, help="kit/bare rounds per model (after one dropped warm-up)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps per side and round")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per side and round (capped by one epoch)")
    ap.add_argument("--overhead-runs", type=int, default=3, help="local runner runs per framework (after one dropped)")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--skip", default="", help=f"comma-separated parts to skip: {', '.join(PARTS)}")
    ap.add_argument("--data-dir", type=Path, default=STATE / "data")
    ap.add_argument("--json", type=Path, help="also write every measured value here")
    args = ap.parse_args(argv)
    frameworks = [f for f in args.frameworks.split(",") if f]
    skip = {p for p in args.skip.split(",") if p}
    if set(frameworks) - set(FRAMEWORKS) or skip - set(PARTS):
        log(f"error: frameworks are {', '.join(FRAMEWORKS)}; parts are {', '.join(PARTS)}")
        return 2
    data_dir = args.data_dir.resolve()
    work = Path(tempfile.mkdtemp(prefix="reprokit-bench-"))
    out: dict = {"machine": {"cpus": len(os.sched_getaffinity(0)), "load_before": os.getloadavg()}}
    misses: list[str] = []
    t_start = time.perf_counter()
    try:
        runner = LocalRunner(ENVS, data_dir, "cpu")
        runner.prepare(set(frameworks), log=log)
        specs = {fw: quick_specs(fw, data_dir, runner) for fw in frameworks}

        if "throughput" not in skip:
            log(f"\n== 1. kit vs bare loop, quick-profile models on the CPU ({out['machine']['cpus']} cores), "
                f"{args.rounds} rounds after a dropped warm-up, {args.warmup} warmup + up to {args.steps} timed "
                f"steps per side, alternating in one process per framework")
            out["throughput"] = {}
            for fw in frameworks:
                out["throughput"][fw] = throughput(fw, runner, specs[fw], work,
                                                   args.rounds, args.warmup, args.steps)
        if "overhead" not in skip:
            log(f"\n== 2. local runner overhead per run (process start to result collected, minus the kit's "
                f"timing.wall_s), median of {args.overhead_runs}")
            out["overhead"] = {fw: runner_overhead(fw, runner, specs[fw][0], work, args.overhead_runs)
                               for fw in frameworks}
        if "render" not in skip:
            log(f"\n== 3. report from {RENDER_FILES:,} result files")
            out["render"] = render_time(work, reference_results())
    except (UserError, RuntimeError) as exc:
        log(f"error: {exc}")
        return 2
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["machine"]["load_after"] = os.getloadavg()

    log(f"\n== summary ({time.perf_counter() - t_start:.0f} s)")
    noisy = False
    for fw, models in out.get("throughput", {}).items():
        ratios = [row["ratio"] for m in models for row in m["rounds"]]
        outer = [row["outer_ratio"] for m in models for row in m["rounds"]]
        cpu = [row["cpu_ratio"] for m in models for row in m["rounds"]]
        median = statistics.median(ratios)
        for m in models:
            rs = [row["ratio"] for row in m["rounds"]]
            log(f"  {fw:<10} {m['experiment']:<26} kit/bare median {m['median_ratio']:.3f} "
                f"(rounds {min(rs):.3f}-{max(rs):.3f}; outer clock {m['median_outer_ratio']:.3f}, "
                f"per CPU second {m['median_cpu_ratio']:.3f}, best round vs best round {m['best_ratio']:.3f}); "
                f"kit {statistics.median(r['kit_sps'] for r in m['rounds']):.1f} vs bare "
                f"{statistics.median(r['bare_sps'] for r in m['rounds']):.1f} samples/s, "
                f"{m['steps']} steps of {m['batch_size']}; spread over rounds kit {m['spread']['kit']:.0%}, "
                f"bare {m['spread']['bare']:.0%}")
            noisy = noisy or max(m["spread"].values()) > NOISY
        verdict = "ok" if median >= MIN_RATIO else "MISSED"
        log(f"  {fw:<10} median of all {len(ratios)} pairwise ratios kit/bare {median:.3f} "
            f"(outer clock {statistics.median(outer):.3f}, per CPU second {statistics.median(cpu):.3f}); "
            f"gate >= {MIN_RATIO}: {verdict}")
        if median < MIN_RATIO:
            misses.append(f"{fw} kit/bare {median:.3f} < {MIN_RATIO}")
        timing = statistics.median(row["timing_ratio"] for m in models for row in m["rounds"])
        verdict = "ok" if abs(timing - 1) <= MAX_TIMING_EFFECT else "MISSED"
        log(f"  {fw:<10} step timing on / off, median of all pairwise throughput ratios {timing:.3f} "
            f"({', '.join(m['experiment'] + ' ' + format(m['median_timing_ratio'], '.3f') for m in models)}); "
            f"gate within {MAX_TIMING_EFFECT:.0%} of 1: {verdict}")
        if abs(timing - 1) > MAX_TIMING_EFFECT:
            misses.append(f"{fw} step timing on/off {timing:.3f}, more than {MAX_TIMING_EFFECT:.0%} from 1")
    for fw, o in out.get("overhead", {}).items():
        log(f"  {fw:<10} local runner overhead per run {o['median']['overhead']:.2f} s (median)")
        o.pop("result")
    if "render" in out:
        r = out["render"]
        verdict = "ok" if r["total_s"] <= MAX_RENDER_S else "MISSED"
        log(f"  report of {r['files']:,} results: {r['total_s']:.2f} s; gate <= {MAX_RENDER_S:.0f} s: {verdict}")
        if r["total_s"] > MAX_RENDER_S:
            misses.append(f"render {r['total_s']:.2f} s > {MAX_RENDER_S} s")
    load = out["machine"]
    if noisy or max(load["load_before"][0], load["load_after"][0]) > load["cpus"]:
        log(f"  note: load average {load['load_before'][0]:.1f} before, {load['load_after'][0]:.1f} after on "
            f"{load['cpus']} cores{'; rounds spread over ' + format(NOISY, '.0%') if noisy else ''}: other work "
            f"shared the CPU, so these figures are not the kit's alone; run again on a quiet machine")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    if misses:
        log("FAILED: " + "; ".join(misses))
        return 1
    log("all gates hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())

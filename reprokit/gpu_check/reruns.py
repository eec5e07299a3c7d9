"""The timed runs' own specs, run again another way through the local runner, after the timed part: the memory
case's twin with a full last evaluation batch, the certificate's PyTorch half at the timed size, and the kit
against its bare loop (apart from the target). Each takes the results, the data folder and its own work folder.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from reprokit.certify import certify_plan
from reprokit.environments import datasets
from reprokit.gpu_check import say
from reprokit.gpu_check.plan import BENCH, TWIN
from reprokit.kits.contract.spec import RunSpec
from reprokit.plan import plan
from reprokit.report.gpu_check_lines import figure, mib
from reprokit.results import utilisation
from reprokit.runners import kit_bench
from reprokit.runners.base import KitCall, run_spec
from reprokit.runners.make import make


def warmup_twin(python: str, results: list[dict[str, Any]], data_dir: Path, work: Path,
                timeout_s: float) -> list[str]:
    """The memory case's fixed run again with a full last evaluation batch: with every evaluation shape warmed
    up (reprokit/kits/training_loop/training.warm_shapes), cuDNN's autotuning of the partial batch stays out of the
    evaluation phase, so both evaluation peaks are the same. Returns what it missed."""
    run = next((r for r in results if r["status"] == "ok" and r["experiment"] == TWIN and r["variant"] == "fixed"),
               None)
    if run is None:
        say("  no finished fixed run of the memory case: no twin")
        return []
    spec = RunSpec.from_dict(run["spec"])
    d, batch = spec.data, spec.train.eval_batch_size
    full = d.test_samples - d.test_samples % batch
    prepared = datasets.prepare({"dataset": d.dataset, "train_samples": d.train_samples, "test_samples": full,
                                 "seed": spec.train.seed}, data_dir, allow_download=False)
    twin = plan.identified(dataclasses.replace(spec, data=dataclasses.replace(
        d, file=prepared.file, sha256=prepared.sha256, test_samples=prepared.test_samples)))
    runner = make("local", data_dir=data_dir, device=twin.device, python=Path(python))
    other = run_spec(runner, twin, work, lambda event: None)
    if other is None or other["status"] != "ok":
        say(f"  the twin failed: {(other or {}).get('failure')}")
        return ["the warmup twin did not finish"]

    def eval_peaks(r: dict[str, Any]) -> dict[str, Any]:
        first = next(p for p in r["memory"]["phases"] if p["phase"] == "eval")
        return {name: got["peak_bytes"] for name, got in first["readings"].items()}

    mine, theirs = eval_peaks(run), eval_peaks(other)
    say(f"  last evaluation batch {spec.data.test_samples % batch} (warmed: "
        f"{run['timing'].get('warmup_eval_batch_sizes')}) against a full one: epoch 1's evaluation peaks "
        + ", ".join(f"{k} {mib(mine[k])} vs {mib(theirs.get(k))}" for k in mine))
    a, b = mine.get("allocated"), theirs.get("allocated")
    if run["environment"]["device"] != "gpu" or not a or not b:
        return []
    return [] if abs(a / b - 1) <= 0.01 else [f"the evaluation peak with a partial last batch ({mib(a)}) is not "
                                               f"the full-batch twin's ({mib(b)}) within 1%"]


def certificate_half(python: str, results: list[dict[str, Any]], data_dir: Path, work: Path,
                     timeout_s: float) -> list[str]:
    """The PyTorch half of the certificate (structure part) for the largest model that was timed, through
    the runner every kit process uses, and its FLOPs beside the timed run's."""
    timed = [r for r in results if r["status"] == "ok" and r["variant"] == "fixed"]
    if not timed:
        return ["  no finished fixed run: nothing to certify"]
    run = max(timed, key=lambda r: r["model"].get("flops_per_sample") or 0)
    spec = RunSpec.from_dict(run["spec"])
    jobs = work / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    (jobs / "spec-0.json").write_text(json.dumps(run["spec"]))
    (jobs / "jobs.json").write_text(json.dumps([{"name": "0", "spec": "spec-0.json", "parts": "structure"}]))
    runner = make("local", data_dir=data_dir, device=spec.device, python=Path(python))
    out = work / "out"
    outcome = runner.run(KitCall("pytorch", "reprokit.kits.certify", ("--jobs", jobs / "jobs.json", "--out-dir", out,
                                                            "--data-dir", data_dir),
                                 output=out, inputs=(jobs,), timeout_s=timeout_s, label="certify-pytorch"),
                         lambda event: None)
    head = (f"  {spec.experiment} at {spec.data.input_size}x{spec.data.input_size}, batch "
            f"{spec.train.batch_size}, {spec.profile} profile: exit {outcome.exit_code}, "
            f"{outcome.wall_s:.1f} s through the {runner.name} runner")
    try:
        side = json.loads((out / "0" / "side.json").read_text())
    except (OSError, json.JSONDecodeError):
        return [head, "  it wrote no readable side.json:", *("  | " + line for line in outcome.log_tail[-8:])]
    lines = [head]
    budget, why = certify_plan.trajectory_budget(spec.device, run["environment"].get("device_name"))
    cost = certify_plan.trajectory_cost(run["spec"])             # the certificates read specs as JSON
    lines.append(f"  trajectory budget {budget:.2g} FLOPs ({why}); this model's dropout passes and trajectories "
                 f"cost {figure(cost, '{:.2g}')}: the full certificate would run them "
                 f"{'at the timed width' if cost is None or cost <= budget else 'at a declared reduced width'}")
    if side.get("message"):
        lines.append(f"  refused: {side['message']}")
    for part, t in (side.get("seconds") or {}).items():
        lines.append(f"  {part}: {t['wall']:.1f} s wall, {t['cpu']:.1f} s CPU")
    counted = (side.get("flops") or {}).get("training")
    ran = run["model"].get("flops_per_sample")
    same = "the same" if counted and ran and abs(counted / ran - 1) < 1e-9 else "DIFFERENT"
    lines.append(f"  training FLOPs per sample: certificate {figure(counted and counted / 1e9, '{:,.3f}')} GFLOP, "
                 f"timed run {figure(ran and ran / 1e9, '{:,.3f}')} GFLOP ({same}); layers "
                 f"{len(side.get('layers') or [])}, traced ops {len(side.get('ops') or [])}")
    top, where = utilisation.peak(run)
    mfu = ran * run["timing"]["samples_per_s"] / top if top and ran else None
    lines.append(f"  MFU of the timed run: {figure(mfu, '{:.1%}')} "
                 f"({figure(run['timing'].get('samples_per_s'), '{:,.1f}')} samples/s x its FLOPs / peak: {where})")
    return lines


def kit_cost(python: str, results: list[dict[str, Any]], data_dir: Path, work: Path,
             timeout_s: float) -> list[str]:
    """The kit against its bare loop on this device, for each fixed run's own spec: `nox -s bench`'s
    throughput part (reprokit.kits.bench through the same runner), 6 rounds from two processes; its lines are printed
    as they come, and the gates it missed are returned."""
    # one spec per experiment: the fixed run's (the bench measures the kit, not the spread of repeats)
    specs = [RunSpec.from_dict(s) for s in {r["experiment"]: r["spec"] for r in results
                                            if r["status"] == "ok" and r["variant"] == "fixed"}.values()]
    if not specs:
        say("  no finished fixed run: no spec to time")
        return []
    runner = make("local", data_dir=data_dir, device=specs[0].device, python=Path(python))
    rounds = SimpleNamespace(**BENCH)
    shutil.rmtree(work, ignore_errors=True)           # an earlier check's rounds are not this one's
    work.mkdir(parents=True)
    try:
        measured = kit_bench.throughput("pytorch", runner, specs, work, rounds)
    except RuntimeError as exc:
        return [f"reprokit.kits.bench failed: {exc}"]
    say("  summary:")
    return [miss for m in measured for miss in kit_bench.pair_summary(m)]

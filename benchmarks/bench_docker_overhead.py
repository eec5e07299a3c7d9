"""The Docker runner's own cost per run, with a real kit image and the real kit.

Measures, for N runs of a tiny real training spec, the time from just before
``DockerRunner.run`` (container create) to the result collected
(``collect``), and subtracts the kit process's own lifetime as the engine
recorded it (State.StartedAt -> FinishedAt): what remains is the orchestrator's
cost (the spec written, create, start, log streaming, wait, inspect,
removal, collect), the training and the kit's own start-up excluded.
Target: median under 1.5 s.

    PYTHONPATH=. python benchmarks/bench_docker_overhead.py [--runs 10] [--framework tensorflow]
        [--base-override reprokit/test-base:bookworm-py311] [--extra-ca /etc/ssl/certs/ca-certificates.crt]
        [--gpus none]

Builds the framework's image first if it is missing (not timed). Needs a Docker
engine; prints one table and exits 1 when the median misses the target.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from reprokit.errors import UserError
from reprokit.execute import data_step
from reprokit.kits.contract.spec import RunSpec
from reprokit.plan import plan
from reprokit.plan.experiments import load
from reprokit.results import results
from reprokit.results.provenance import code
from reprokit.runners import base
from reprokit.runners import docker as dr

TARGET_S = 1.5
EXPERIMENT = REPO / "reprokit" / "kits" / "experiments" / "simplecnn_cifar10_memory.toml"


def tiny_spec(runner: dr.DockerRunner, framework: str, data_dir: Path, device: str) -> RunSpec:
    """The built-in experiment's quick profile cut to a few steps: the training is ~0."""
    opts = plan.Options(profile="quick", device=device, repeats=1, frameworks=(framework,),
                        data=data_step.Preparing(data_dir, allow_download=False))
    (spec,) = [s for s in plan.specs_for(load(EXPERIMENT), opts, runner.describe, code())
               if s.framework == framework]
    return plan.identified(dataclasses.replace(
        spec, train=dataclasses.replace(spec.train, epochs=1, max_steps_per_epoch=2, warmup_steps=1),
        data=dataclasses.replace(spec.data, test_samples=min(spec.data.test_samples, 64))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--framework", default="tensorflow", choices=("tensorflow", "pytorch"))
    ap.add_argument("--base-override", default=None, help="local base image (CI stand-in for the pinned base)")
    ap.add_argument("--extra-ca", default=None, help="CA bundle for pip behind a TLS-re-signing proxy")
    ap.add_argument("--gpus", default="none")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="reprokit-bench-"))
    data_dir = work / "data"
    data_dir.mkdir()
    try:
        runner = dr.DockerRunner(REPO, data_dir, gpus=args.gpus, base_override=args.base_override,
                                 extra_ca=args.extra_ca, log=lambda line: print(line, file=sys.stderr))
        spec = tiny_spec(runner, args.framework, data_dir, "cpu" if runner.gpus == "none" else "gpu")
        runner.prepare({args.framework})              # builds the image if missing: not timed
        rows = []
        for i in range(args.runs + 1):                # run 0 warms the engine and the page cache: dropped
            t0 = time.perf_counter()
            result = base.run_spec(runner, spec, work / "runs", lambda e: None)
            total = time.perf_counter() - t0
            if result["status"] != "ok" or results.problems(result):
                print(f"run {i} failed: {result.get('failure')}", file=sys.stderr)
                return 2
            timing = result["launcher"]["timing"]
            if i:
                rows.append({"total": total, "process": timing["process_s"], "kit_wall": result["timing"]["wall_s"],
                             "start": timing["start_s"], "overhead": total - timing["process_s"]})
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        import shutil
        shutil.rmtree(work, ignore_errors=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    over = sorted(r["overhead"] for r in rows)
    print(f"image {runner.recipe(args.framework).tag}, {args.runs} runs (after 1 warm-up), "
          f"engine {runner._engine_version}")
    print(f"  run_spec() wall                 median {med('total'):.3f} s")
    print(f"  kit process lifetime (engine)   median {med('process'):.3f} s   "
          f"(kit's own timing.wall_s {med('kit_wall'):.3f} s)")
    print(f"  create + start                  median {med('start'):.3f} s")
    print(f"  orchestrator overhead           median {statistics.median(over):.3f} s   "
          f"min {over[0]:.3f}  max {over[-1]:.3f}   target < {TARGET_S} s")
    return 0 if statistics.median(over) < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())

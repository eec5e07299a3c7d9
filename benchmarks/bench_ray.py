"""What the Ray backend costs per run, and what it gains, on a local cluster (loopback only).

    PYTHONPATH=. python benchmarks/bench_ray.py [--runs 12] [--overhead-runs 6] [--json OUT]

The cluster is the tests' (tests/ray_cluster.py): a head and two worker nodes
on this machine, each worker with one fake GPU slot (the test-only switch) and
its own state folder; the nodes run the local runner. The runs are the tests'
tiny experiment on the quick profile, one CPU thread each.

1. Speed-up. The same matrix of ``--runs`` runs (both frameworks, repeats),
   first one after another through the local runner on this host, then
   through Ray on the two slots. Prints serial wall / parallel wall; target at
   least 1.7 (2 is the ceiling on 2 slots).
2. Scheduling overhead. One run at a time through the Ray backend
   (``reprokit.execute.cluster.run_all``): the time from submitting it to its result
   stored, minus the kit process's own lifetime (``launcher.wall_s``, which
   the node's runner measures). Prints the median; target under 0.5 s.

Exit status: 0 when both targets hold, 1 when one misses, 2 on a setup error.
The load average is printed before and after: other work on the machine
shows in both figures.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import ray_cluster  # noqa: E402 - sets Ray's environment before Ray is imported
from conftest import TINY  # noqa: E402

from reprokit.console import RunProgress  # noqa: E402
from reprokit.environments.envs import ENVS  # noqa: E402
from reprokit.environments.topology import FAKE_SLOTS_ENV  # noqa: E402
from reprokit.execute import cluster, data_step, node_tasks, schedule  # noqa: E402
from reprokit.kits.contract.spec import Spec  # noqa: E402
from reprokit.plan.experiments import load  # noqa: E402
from reprokit.plan.plan import Options, specs_for  # noqa: E402
from reprokit.results.provenance import code  # noqa: E402
from reprokit.results.store import Store  # noqa: E402
from reprokit.runners.local import LocalRunner  # noqa: E402

MAX_OVERHEAD_S = 0.5
MIN_SPEEDUP = 1.7


class TimedStore(Store):
    """A store that notes when each result was stored."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.stored_at: dict[str, float] = {}

    def put(self, result: dict) -> Path:
        path = super().put(result)
        self.stored_at[result["run_id"]] = time.perf_counter()
        return path


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=12, help="runs in the speed-up matrix (even: both frameworks)")
    parser.add_argument("--overhead-runs", type=int, default=6, help="runs for the overhead, one at a time")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="rk-bench-", dir="/tmp"))
    print(f"load average before: {load_average()}  ({os.cpu_count()} CPUs)", flush=True)
    local_cluster = None
    try:
        (root / "exp").mkdir()
        (root / "exp" / "tiny.toml").write_text(TINY)
        data_dir = root / "data"
        runner = LocalRunner(ENVS, data_dir, "cpu")
        runner.prepare({"pytorch", "tensorflow"})
        opts = Options(profile="quick", device="cpu", repeats=max(1, args.runs // 2),
                       frameworks=("pytorch", "tensorflow"),
                       data=data_step.Preparing(data_dir, allow_download=False))
        specs = specs_for(load(root / "exp" / "tiny.toml"), opts, runner.describe, code())[:args.runs]

        def label(i: int, spec: Spec) -> RunProgress:
            return RunProgress(f"[run {i + 1}] {spec.framework} r{spec.repeat}")

        t0 = time.perf_counter()
        serial_store = Store(root / "serial" / "results")
        schedule.run_all(runner, specs, [None], root / "serial" / "work", root / "serial" / "ledger",
                         serial_store, label)
        serial = time.perf_counter() - t0

        local_cluster = ray_cluster.LocalCluster(root / "cluster")
        local_cluster.add_worker("n1")
        local_cluster.add_worker("n2")
        os.environ[FAKE_SLOTS_ENV] = "1"        # the head asks for the nodes' fake GPU slots
        cluster.connect(local_cluster.address)
        serving = cluster.check("local", "cpu", local_cluster.address)[0]
        head, _ = cluster.stage_on_head(runner, {"pytorch", "tensorflow"},
                                        {s.data.file: data_dir / s.data.file for s in specs if s.data.file})
        job = node_tasks.Job("local", "cpu", head)
        t0 = time.perf_counter()
        parallel_store = Store(root / "parallel" / "results")
        failures, _ = cluster.run_all(job, specs, serving, parallel_store, label)
        parallel = time.perf_counter() - t0
        # how long one kit process took alone and side by side: contention shows here, not in the overhead
        kit_s = {name: statistics.median(r["launcher"]["wall_s"] for r in store.all())
                 for name, store in (("alone", serial_store), ("side by side", parallel_store))}
        if failures:
            print(f"error: {failures} run(s) failed on the cluster", file=sys.stderr)
            return 2

        overheads = []
        for spec in specs[:args.overhead_runs]:
            store = TimedStore(root / f"overhead-{spec.run_id}")
            t0 = time.perf_counter()
            cluster.run_all(job, [spec], serving, store, label)
            result = store.get(spec.run_id)
            overheads.append(store.stored_at[spec.run_id] - t0 - result["launcher"]["wall_s"])
    finally:
        if local_cluster is not None:
            local_cluster.stop()
        shutil.rmtree(root, ignore_errors=True)

    speedup = serial / parallel
    overhead = statistics.median(overheads)
    print(f"\nload average after: {load_average()}")
    print(f"speed-up, {len(specs)} quick runs (1 CPU thread each) on 2 slots: serial {serial:.1f} s / "
          f"parallel {parallel:.1f} s = {speedup:.2f} (target >= {MIN_SPEEDUP})")
    print(f"one kit process (median): {kit_s['alone']:.1f} s alone, {kit_s['side by side']:.1f} s side by side")
    print(f"scheduling overhead per run through Ray, submit to stored, kit process excluded: median "
          f"{overhead:.3f} s over {len(overheads)} runs (min {min(overheads):.3f}, max {max(overheads):.3f}; "
          f"target < {MAX_OVERHEAD_S})")
    if args.json:
        args.json.write_text(json.dumps({"serial_s": serial, "parallel_s": parallel, "speedup": speedup, "kit_s": kit_s,
                                         "overhead_s": overheads, "overhead_median_s": overhead}, indent=1))
    return 0 if speedup >= MIN_SPEEDUP and overhead < MAX_OVERHEAD_S else 1


if __name__ == "__main__":
    sys.exit(main())

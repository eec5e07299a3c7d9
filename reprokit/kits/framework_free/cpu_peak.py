"""The CPU's measured matmul peak, kept per CPU, cores, threads and framework so that one run measures it.

Measuring costs about 0.35 s after every CPU run (most of the local runner's
overhead). The figure depends on the CPU, the cores the process may use, the
thread settings and the framework's build, so those make the key. The kit
reads the cache in the data folder (read-only to it); the host adds what a run
measured once its result is collected. A result says which it used
(``environment.matmul_peak_source``). Delete the file to measure again.
Standard library only: both sides import it.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reprokit.kits.contract.files import write_json_atomic
from reprokit.kits.framework_free.environment import cpu_name
from reprokit.kits.framework_free.measure import now

CACHE_NAME = "cpu-matmul-peaks.json"
MEASURED = "measured by this run after its training"
# The best of short windows: a moment of load elsewhere lowers one window, not the peak a run is held against.
WINDOWS, WINDOW_S = 5, 0.1


def best_rate(step: Callable[[], Any], sync: Callable[[Any], Any], flops: float) -> float:
    """The highest rate, in FLOP/s, of ``step`` (``flops`` per call) over WINDOWS windows of WINDOW_S seconds,
    each ended by ``sync`` of its last result; one call first, untimed."""
    sync(step())
    best = 0.0
    for _ in range(WINDOWS):
        count, t0 = 0, now()
        while True:
            out = step()
            count += 1
            if now() - t0 >= WINDOW_S:
                break
        sync(out)
        best = max(best, flops * count / (now() - t0))
    return best


def key(env: dict[str, Any]) -> str:
    """What the peak depends on, from a result's environment section."""
    threads = env["cpu_threads"]      # one matmul runs on the intra-op pool: inter-op threads do not change it
    return (f"{env['framework']} {env['framework_version']} | {cpu_name()} | "
            f"{len(os.sched_getaffinity(0))} usable cpus | intra_op {threads['intra_op']}")


def _read(path: Path) -> dict[str, Any]:
    """The cache's well-formed entries. A damaged cache (cut short, not an object, an entry without its figure)
    only costs a measurement: its bad entries are absent here, and the host's next write leaves them out."""
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(cached, dict):
        return {}
    return {k: v for k, v in cached.items() if _well_formed(v)}


def _well_formed(entry: Any) -> bool:
    flops = entry.get("flops") if isinstance(entry, dict) else None
    return (isinstance(flops, (int, float)) and not isinstance(flops, bool) and math.isfinite(flops) and flops > 0
            and isinstance(entry.get("run_id"), str))


def for_run(env: dict[str, Any], data_dir: Path, measure: Callable[[], float]) -> dict[str, Any]:
    """The environment fields of the peak: the cached figure for this key, else ``measure()``'s."""
    k = key(env)
    cached = _read(data_dir / CACHE_NAME).get(k)
    if cached:
        return {"matmul_peak_flops": cached["flops"], "matmul_peak_key": k,
                "matmul_peak_source": f"cached: measured by run {cached['run_id']} on this CPU with the same threads "
                                      f"and framework ({CACHE_NAME} in the data folder; delete it to measure again)"}
    return {"matmul_peak_flops": measure(), "matmul_peak_key": k, "matmul_peak_source": MEASURED}


def remember(data_dir: Path, result: dict[str, Any]) -> None:
    """Host side: keep a peak the run measured itself. The cache only saves time: a write that fails is skipped."""
    env = result.get("environment") or {}
    if result.get("status") != "ok" or env.get("matmul_peak_source") != MEASURED:
        return
    path = data_dir / CACHE_NAME
    peaks = _read(path)
    peaks[env["matmul_peak_key"]] = {"flops": env["matmul_peak_flops"], "run_id": result["run_id"]}
    try:
        write_json_atomic(path, peaks)
    except OSError:
        pass

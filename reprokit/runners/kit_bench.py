"""The kit against its bare loop, through a runner: reprokit.kits.bench in the framework's environment, in fresh
processes of a few rounds each, pooled until both median ratios' intervals are settled, and the gates of one
(experiment, framework) pair. `nox -s bench` (benchmarks/bench_kit_overhead.py) and scripts/gpu_check's cost of the kit
(reprokit/gpu_check/reruns.py) both measure with it.
"""
from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path
from typing import Any

from reprokit.kits.contract.spec import RunSpec
from reprokit.results import stats
from reprokit.runners.base import KitCall
from reprokit.runners.local import LocalRunner

MIN_RATIO = 0.97          # kit throughput / bare-loop throughput, median over rounds, per model and framework
GOAL_RATIO = 0.99         # where we want that ratio to be (printed, not gated)
GATED = {"ratio": "kit/bare", "null_ratio": "bare/bare again"}      # the ratios whose intervals decide the rounds


def log(line: str = "") -> None:
    print(line, flush=True)


def throughput(framework: str, runner: LocalRunner, specs: list[RunSpec], work: Path,
               args: Any) -> list[dict[str, Any]]:
    """reprokit.kits.bench in the framework's environment, through the runner, in fresh processes of
    ``args.per_process`` rounds each, until every model's pooled rounds are settled; each model's summary.

    One process keeps what it gave a side (memory layout, thread placement) for all its rounds: the
    same kit against itself came out 7% slower in 6 rounds of 6 in one process and not in the next.
    Pooling the rounds of several processes puts that in the spread, where the interval sees it (pyperf
    spawns worker processes for the same reason)."""
    pooled: dict[str, dict[str, Any]] = {}
    for p in itertools.count():
        todo = [s for s in specs if not _settled(pooled.get(s.experiment), args)]
        if not todo:
            break
        done = len(pooled[todo[0].experiment]["rounds"]) if pooled else 0     # the same for every unsettled model
        rounds = min(args.per_process, (args.max_rounds if done < args.max_rounds else _most(args)) - done)
        log(f"  process {p + 1}: {rounds} round(s) of {', '.join(s.experiment for s in todo)}")
        for m in _bench_process(framework, runner, todo, work / f"{framework}-{p + 1}", rounds, args):
            seed = m.pop("seed")
            kept = pooled.setdefault(m["experiment"], {**m, "rounds": [], "seeds": []})
            kept["rounds"] += m["rounds"]
            kept["seeds"].append(seed)
            widths = ", ".join(f"{name} {w:.1%}" for name, w in zip(GATED.values(), _widths(kept))
                               if w < math.inf) or f"none below {stats.MIN_INTERVAL} rounds"
            log(f"  {m['framework']:<10} {m['experiment']:<26} {len(kept['rounds'])} rounds from {p + 1} "
                f"process(es): interval half-widths {widths}")
    return [summary(pooled[s.experiment]) for s in specs]


def _bench_process(framework: str, runner: LocalRunner, specs: list[RunSpec], work: Path, rounds: int,
                   args: Any) -> list[dict[str, Any]]:
    """One reprokit.kits.bench process; its per-round lines are shown as they come."""
    work.mkdir(parents=True)
    spec_path, out = work / "specs.json", work / "out"
    spec_path.write_text(json.dumps([s.to_dict() for s in specs]))
    call = KitCall(framework, "reprokit.kits.bench", ("--specs", spec_path, "--data-dir", runner.data_dir,
                                             "--rounds", str(rounds), "--warmup", str(args.warmup),
                                             "--steps", str(args.steps), "--out", out / "throughput.json"),
                   output=out, inputs=(spec_path,), timeout_s=3600, label=f"bench-{framework}")
    def shown(event: dict[str, Any]) -> None:
        if "bench" in event:
            log(event["bench"])

    outcome = runner.run(call, shown)
    if outcome.exit_code != 0:
        raise RuntimeError(f"{framework}: reprokit.kits.bench ended with {outcome.exit_code}:\n"
                           + "\n".join(outcome.log_tail))
    measured: list[dict[str, Any]] = json.loads((out / "throughput.json").read_text())
    return measured


def _estimate(m: dict[str, Any], key: str) -> stats.Estimate:
    """The median of one figure over the pooled rounds, with its interval (as the reports make it)."""
    return stats.estimate([r[key] for r in m["rounds"]])


def _widths(m: dict[str, Any]) -> list[float]:
    """Each gated median ratio's interval: its larger distance from the median, relative to it (inf while there
    is no interval)."""
    return [max(e.median - e.low, e.high - e.median) / e.median if e.kind == "interval" else math.inf
            for e in (_estimate(m, key) for key in GATED)]


def _settled(m: dict[str, Any] | None, args: Any) -> bool:
    """Enough rounds: min_rounds with both gated median ratios' intervals within +-target; else max_rounds, unless
    kit/bare's interval still holds the gate (MIN_RATIO): then on to undecided_rounds, since a pair whose interval
    straddles the gate is not shown either way (sides that spread 10% over rounds leave a median of 15 rounds
    +-5%), whichever side of the gate its median falls."""
    if m is None:
        return False
    n = len(m["rounds"])
    if n >= args.min_rounds and max(_widths(m)) <= args.target:
        return True
    e = _estimate(m, "ratio")
    undecided = e.kind == "interval" and e.low < MIN_RATIO <= e.high
    return n >= (_most(args) if undecided else args.max_rounds)


def _most(args: Any) -> int:
    return int(max(args.max_rounds, args.undecided_rounds))


def summary(m: dict[str, Any]) -> dict[str, Any]:
    """One model's pooled rounds summed up: each median ratio with its interval, each side's spread."""
    rows = m["rounds"]

    def interval(key: str) -> tuple[float, float, float | None] | None:
        e = _estimate(m, key)
        return (e.low, e.high, e.coverage) if e.kind == "interval" else None

    return {**m, "processes": len(m["seeds"]),
            **{f"median_{k}": statistics.median(r[k] for r in rows)
               for k in ("ratio", "outer_ratio", "cpu_ratio", "timing_ratio", "null_ratio")},
            **{f"interval_{k}": interval(k) for k in ("ratio", "timing_ratio", "null_ratio")},
            # Each side's fastest round: what it does when nothing else runs (robust to bursts of other work).
            "best_ratio": max(r["kit_sps"] for r in rows) / max(r["bare_sps"] for r in rows),
            # Spread of each side over rounds (stdev / mean): above a few percent, the machine was not quiet.
            "spread": {side: statistics.pstdev(v) / statistics.fmean(v)
                       for side in ("kit", "untimed", "bare", "again") for v in [[r[f"{side}_sps"] for r in rows]]}}


def _interval(m: dict[str, Any], name: str) -> str:
    found = m[f"interval_{name}"]
    if found is None:
        return "no interval (under 6 rounds)"
    lo, hi, coverage = found
    med = m[f"median_{name}"]
    return f"{coverage:.1%} interval {lo:.3f}-{hi:.3f} ({(lo - med) / med:+.1%}/{(hi - med) / med:+.1%})"


def pair_summary(m: dict[str, Any]) -> list[str]:
    """The gates of one (experiment, framework) pair, printed; the misses returned."""
    misses = []
    name = f"{m['framework']:<10} {m['experiment']:<26}"
    rows = m["rounds"]
    rs = [r["ratio"] for r in rows]
    ratio = m["median_ratio"]
    lo, hi = m["interval_ratio"][:2] if m["interval_ratio"] else (math.nan, math.nan)
    # The gate is the median's; an interval that still holds it says the host's noise left the pair undecided.
    unshown = (f" (its interval {lo:.3f}-{hi:.3f} holds {MIN_RATIO}: this host showed it neither way)"
               if lo < MIN_RATIO <= hi else "")
    if ratio < MIN_RATIO:
        verdict = "MISSED" + unshown
        misses.append(f"{m['framework']} {m['experiment']} kit/bare {ratio:.3f} < {MIN_RATIO}{unshown}")
    elif lo > 1:
        # The kit beats its reference by more than the interval: the reference is not the fastest loop.
        verdict = "MISSED (the kit beats its bare loop beyond the interval: make the reference faster)"
        misses.append(f"{m['framework']} {m['experiment']} bare loop slower than the kit (interval from {lo:.3f})")
    else:
        verdict = ("ok" + (f", goal {GOAL_RATIO} reached" if ratio >= GOAL_RATIO else f", goal {GOAL_RATIO} not yet")
                   + unshown)
    log(f"  {name} kit/bare median {ratio:.3f}, {_interval(m, 'ratio')}, {len(rows)} rounds in {m['processes']} "
        f"processes "
        f"(range {min(rs):.3f}-{max(rs):.3f}); gate >= {MIN_RATIO} (goal {GOAL_RATIO}): {verdict}")
    log(f"  {'':<10} {'':<26}   kit {statistics.median(r['kit_sps'] for r in rows):.1f}, bare "
        f"{statistics.median(r['bare_sps'] for r in rows):.1f} samples/s (medians), {m['steps']} timed steps of "
        f"{m['batch_size']} in {m['epochs']} epoch(s); spread over rounds (stdev/mean) kit {m['spread']['kit']:.1%}, "
        f"kit without timing {m['spread']['untimed']:.1%}, bare {m['spread']['bare']:.1%}, bare again "
        f"{m['spread']['again']:.1%}; "
        f"outer clock {m['median_outer_ratio']:.3f}, per CPU second {m['median_cpu_ratio']:.3f}, best round vs best "
        f"round {m['best_ratio']:.3f}")
    timing, found = m["median_timing_ratio"], m["interval_timing_ratio"]
    cost = f"{1 - found[1]:.1%} to {1 - found[0]:.1%}" if found else "no interval yet"
    log(f"  {'':<10} {'':<26}   step timing on/off median {timing:.3f}, {_interval(m, 'timing_ratio')}: what the "
        f"kit's step clock costs ({cost} of the kit's throughput), a reading inside kit/bare's gate")
    null, found = m["median_null_ratio"], m["interval_null_ratio"]
    # The null check judges by its interval, not by a fixed band around 1: with ~4% noise per round, the median
    # of 15 rounds is ~1.5% uncertain, and a band of 2% would fail a perfect bench one time in five.
    ok = found is not None and found[0] <= 1 <= found[1]
    log(f"  {'':<10} {'':<26}   bare/bare again (the bench's null check: the bare loop against itself) median "
        f"{null:.3f}, {_interval(m, 'null_ratio')}; gate interval covers 1: {'ok' if ok else 'MISSED'}")
    if not ok:
        misses.append(f"{m['framework']} {m['experiment']} bare/bare again {null:.3f}: the same loop differs from "
                      f"itself beyond the interval ({_interval(m, 'null_ratio')}), so no ratio of this pair holds to "
                      f"its interval's width")
    return misses

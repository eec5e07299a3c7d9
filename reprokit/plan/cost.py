"""What a plan will cost on a GPU the user has not rented yet: `reproduce --dry-run --gpu-model NAME`.

Each run's estimate is the one the plan prints (reprokit/plan/estimate.py), made for that GPU model: the
median of finished runs like it on that model where there are any (measured), else the run's training
FLOPs at a stated share of the model's datasheet peak (FLOPs alone). The total says how much of it comes
from each, and which runs it cannot estimate. A price per hour turns the hours into money; nothing here
knows a price.

The hours are GPU-hours: a run at N GPUs (--devices N, or an experiment's device_counts) costs N GPUs for as long as
it runs. A sweep (--devices 1,2,4,8) is priced before any run at N has finished, so each run at N, a script's or
the kit's own, is taken to last as long as its run at one GPU: no speed-up over N = 1, an upper bound (unless N
GPUs train slower than one). It also says how long one node is held to run them, packed in rounds as the host
starts them (reprokit/plan/device_counts.py).
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reprokit.claims import sequential
from reprokit.errors import UserError
from reprokit.kits.contract.spec import Spec
from reprokit.plan import device_counts, estimate, matrix, repeats
from reprokit.plan.inputs import DataStep
from reprokit.plan.request import Request
from reprokit.results import utilisation


@dataclass(frozen=True)
class Model:
    key: str                        # the peak table's row name, e.g. h100-sxm
    name: str                       # a name its driver prints, which the estimate looks up
    source: str


def known() -> list[str]:
    return sorted(utilisation.table())


def gpu_model(asked: str) -> Model:
    """The peak table's GPU model a --gpu-model names: its row (h100-sxm, a100, l4), one of the names its driver
    prints, or a row with its memory size (A100-40GB); anything else is refused with the names known."""
    table = utilisation.table()
    folded = "-".join(asked.lower().split())
    memory_less = re.sub(r"-\d+gb$", "", folded)
    for key, row in table.items():
        names = {"-".join(n.lower().split()) for n in row["names"]}
        if folded in (key, *names) or memory_less == key:
            return Model(key, row["names"][0], row["source"])
    raise UserError(f"--gpu-model {asked}: no peak is known for it; known models: {', '.join(known())} "
                    f"(reprokit/results/peak_flops.toml, from NVIDIA's datasheets)")


def on_model(result: dict[str, Any], model: Model) -> bool:
    env = result.get("environment") or {}
    return env.get("device") == "gpu" and \
        utilisation.model(env.get("device_name") or "") is utilisation.table()[model.key]


def dry_run(request: Request, data: DataStep, history: list[dict[str, Any]], model: Model) -> list[str]:
    """What `reproduce --dry-run --gpu-model NAME` prints: the plan it prices, each run at its count of devices
    (--devices, else its experiment's device_counts), its cost on the model, and the most that --repeats auto may
    add."""
    specs, profile, rule, claims, left_out = matrix.on_gpu_elsewhere(request, data)
    at = Counter(estimate.devices(s) for s in specs)
    swept = " (" + ", ".join(f"{k} at {n}" for n, k in sorted(at.items())) + " devices)" if set(at) != {1} else ""
    out = [f"plan: {len(specs)} runs{swept}, profile {profile} on a GPU, {len({s.experiment for s in specs})} "
           f"experiment(s)" + (f", --repeats auto ({sequential.MIN_REPEATS} repeats each, up to {rule.cap})"
                               if rule else "")]
    out += lines(of_plan(specs, history, model), model, request.how.price_per_hour)
    out += [left_out] if left_out else []
    if rule:
        more = repeats.to_the_cap(specs, claims, rule)
        out.append(f"at most, if every configuration a ratio claim reads needed the cap of {rule.cap} repeats "
                   f"({len(more)} more runs):")
        out += lines(of_plan(specs + more, history, model), model, request.how.price_per_hour)
    return out


@dataclass(frozen=True)
class Cost:
    runs: int
    measured_s: float               # GPU-seconds (GPUs x seconds) from finished runs on this model
    flops_s: float                  # GPU-seconds from FLOPs and the datasheet peak alone
    unknown: list[str]              # runs it cannot estimate, one label each
    node_gpus: int = 1              # the GPUs of the one node the runs are packed on
    node_s: float = 0.0             # how long that node is held: its rounds, each as long as its longest run
    rounds: int = 0
    by_count: dict[int, float] = field(default_factory=dict)        # GPU-seconds of the runs at each count
    by_experiment: dict[str, float] = field(default_factory=dict)   # GPU-seconds of each experiment's runs

    @property
    def total_s(self) -> float:
        return self.measured_s + self.flops_s


def of_plan(specs: Sequence[Spec], history: list[dict[str, Any]], model: Model, node_gpus: int | None = None
            ) -> Cost:
    """The plan's GPU time on this model, run by run (GPUs x hours: a run at N GPUs for as long as it runs), and how
    long one node of ``node_gpus`` GPUs (default: the widest run's) is held to run them, packed in rounds."""
    priced = [(s, estimate.devices(s)) for s in specs]
    mine = [r for r in history if on_model(r, model)]
    measured = flops = 0.0
    unknown = []
    timed: list[tuple[Spec, int, float]] = []
    by_count: dict[int, float] = {}
    by_experiment: dict[str, float] = {}
    for spec, n in priced:
        seconds, how = estimate.seconds(spec, mine, model.name)
        if seconds is None:
            unknown.append(f"{spec.experiment}/{spec.framework}/{spec.variant} ({how})")
            continue
        if how.startswith(estimate.MEASURED):
            measured += seconds * n
        else:
            flops += seconds * n
        timed.append((spec, n, seconds))
        by_count[n] = by_count.get(n, 0.0) + seconds * n
        by_experiment[spec.experiment] = by_experiment.get(spec.experiment, 0.0) + seconds * n
    gpus = node_gpus or max((n for _, n in priced), default=1)
    node_s, rounds = _on_one_node(timed, gpus)
    return Cost(len(priced), measured, flops, unknown, gpus, node_s, rounds, by_count, by_experiment)


def _on_one_node(timed: list[tuple[Spec, int, float]], gpus: int) -> tuple[float, int]:
    """(seconds, rounds) of one node of ``gpus`` GPUs holding the runs, packed as the host starts them: repeat by
    repeat, in as few rounds as they fit (reprokit/plan/device_counts.py), the longest first, so that a round's runs
    take about as long; each round as long as its longest run."""
    total, count = 0.0, 0
    for repeat in sorted({spec.repeat for spec, _, _ in timed}):
        mine = sorted((t for t in timed if t[0].repeat == repeat), key=lambda t: -t[2])
        for placed in device_counts.rounds([n for _, n, _ in mine], [gpus]):
            total += max(mine[k][2] for k, _ in placed)
            count += 1
    return total, count


def lines(cost: Cost, model: Model, price_per_hour: float | None) -> list[str]:
    """What the dry run prints about the plan's cost on the model."""
    hours = cost.total_s / 3600
    swept = cost.node_gpus > 1
    out = [f"on {model.key} GPUs ({model.name}): {hours:.2f} GPU-hours (GPUs x hours) for the "
           f"{cost.runs - len(cost.unknown)} runs it can estimate" if swept else
           f"on one {model.key} ({model.name}): {hours:.2f} GPU-hours for the {cost.runs - len(cost.unknown)} "
           f"runs it can estimate, one at a time"]
    if swept:
        out.append("  a run at N GPUs is priced as N GPUs for as long as its run at 1 GPU: no speed-up over N = 1, "
                   "an upper bound (unless N GPUs train slower than one), where no run at N finished on this model")
        out.append(f"  on one node of {cost.node_gpus} GPUs: {cost.node_s / 3600:.2f} node-hours, the runs in "
                   f"{cost.rounds} rounds as the host starts them (repeat by repeat, in as few rounds as they fit, "
                   f"each round as long as its longest run)")
        out.append("  GPU-hours by count: " + ", ".join(f"{n} GPU{'s' if n > 1 else ''} {s / 3600:.2f}"
                                                         for n, s in sorted(cost.by_count.items()))
                   + "; by experiment: " + ", ".join(f"{name} {s / 3600:.2f}"
                                                      for name, s in sorted(cost.by_experiment.items())))
    if cost.total_s:
        out.append(f"  {cost.measured_s / cost.total_s:.0%} of it from finished runs on this model, "
                   f"{cost.flops_s / cost.total_s:.0%} from training FLOPs alone at {estimate.GPU_SHARE:.0%} of "
                   f"the datasheet peak ({model.source}); environment builds not included")
    if price_per_hour is not None:
        out.append(f"  at {price_per_hour:.2f} per GPU-hour: {hours * price_per_hour:.2f}"
                   + (" (the unestimated runs not included)" if cost.unknown else ""))
    if cost.unknown:
        out.append(f"  not estimated ({len(cost.unknown)} runs): {'; '.join(sorted(set(cost.unknown)))}")
    return out

"""What a plan will cost on a GPU the user has not rented yet: `reproduce --dry-run --gpu-model NAME`.

Each run's estimate is the one the plan prints (reprokit/plan/estimate.py), made for that GPU model: the
median of finished runs like it on that model where there are any (measured), else the run's training
FLOPs at a stated share of the model's datasheet peak (FLOPs alone). The total says how much of it comes
from each, and which runs it cannot estimate. A price per hour turns the hours into money; nothing here
knows a price.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kits.contract.spec import Spec
from reprokit.errors import UserError
from reprokit.plan import estimate
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


@dataclass(frozen=True)
class Cost:
    runs: int
    measured_s: float               # from finished runs on this model
    flops_s: float                  # from FLOPs and the datasheet peak alone
    unknown: list[str]              # runs it cannot estimate, one label each

    @property
    def total_s(self) -> float:
        return self.measured_s + self.flops_s


def of_plan(specs: list[Spec], history: list[dict[str, Any]], model: Model) -> Cost:
    """The plan's GPU time on this model, run by run, one run at a time."""
    mine = [r for r in history if on_model(r, model)]
    measured = flops = 0.0
    unknown = []
    for spec in specs:
        seconds, how = estimate.seconds(spec, mine, model.name)
        if seconds is None:
            unknown.append(f"{spec.experiment}/{spec.framework}/{spec.variant} ({how})")
        elif how.startswith(estimate.MEASURED):
            measured += seconds
        else:
            flops += seconds
    return Cost(len(specs), measured, flops, unknown)


def lines(cost: Cost, model: Model, price_per_hour: float | None) -> list[str]:
    """What the dry run prints about the plan's cost on the model."""
    hours = cost.total_s / 3600
    out = [f"on one {model.key} ({model.name}): {hours:.2f} GPU-hours for the {cost.runs - len(cost.unknown)} "
           f"runs it can estimate, one at a time"]
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

"""What the scaling section says of a GPU sweep's GPUs: that the kit's placement of its runs is untested on real
GPUs, and which GPU models its runs held where they differ.

A run's GPU model is in its result's environment: ``device_name`` (the kit's, its first device), and, where
--mixed-gpus let a sweep run on a host whose GPUs differ in model, ``gpu_models`` (each GPU the run held, as the
host listed them) with the declaration ``mixed_gpus`` (reprokit/execute/device_placement.py). A sweep whose
runs held different models compares different GPUs as well as different counts, so the scaling section says so,
declared or not (results gathered from two hosts differ too).
"""
from __future__ import annotations

from typing import Any

PLACEMENT_UNTESTED = ("The GPUs of these runs were chosen by the kit's placement (runs in rounds, each on GPUs of "
                     "its own: docs/cluster.md, Rounds), which its tests check on described hosts only: it is "
                     "untested on real GPUs. Each run's GPUs are in its result (launcher.placement).")


def lines(sweep: dict[str, dict[int, list[dict[str, Any]]]]) -> list[str]:
    """What the scaling section says of a sweep's GPUs: that their placement is untested on real GPUs, and where
    its runs held GPUs of more than one model; nothing for a sweep on a CPU."""
    if not any(r["spec"].get("device") == "gpu" for counts in sweep.values() for rs in counts.values() for r in rs):
        return []
    mixed = mixed_line(sweep)
    return [PLACEMENT_UNTESTED, *([mixed] if mixed else [])]


def held(result: dict[str, Any]) -> list[str]:
    """The models of the GPUs a run held: as declared, else its device's name."""
    environment = result.get("environment") or {}
    return list(environment.get("gpu_models") or [environment.get("device_name") or "unknown"])


def mixed_line(sweep: dict[str, dict[int, list[dict[str, Any]]]]) -> str | None:
    """The sentence for a sweep (its runs by framework and device count) whose runs held GPUs of more than one model;
    None where every run held the same model, or ran on a CPU."""
    runs = sorted(((n, r) for counts in sweep.values() for n, rs in counts.items() for r in rs
                   if r["spec"].get("device") == "gpu"), key=lambda nr: nr[0])
    if len({model for _, r in runs for model in held(r)}) < 2:
        return None
    by_count: dict[int, set[str]] = {}
    for n, r in runs:
        by_count.setdefault(n, set()).update(held(r))
    declared = any((r.get("environment") or {}).get("mixed_gpus") for _, r in runs)
    models = "; ".join(f"{n} device{'s' if n > 1 else ''}: {', '.join(sorted(m))}" for n, m in by_count.items())
    return (f"**Mixed GPUs{' (--mixed-gpus)' if declared else ''}:** these runs held GPUs of more than one model "
            f"({models}), so a count's throughput against another's compares different GPUs as well as different "
            f"counts.")

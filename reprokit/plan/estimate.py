"""How long a run will take, before it runs: for the plan, the dry run and the ETA.

In order of trust: the median wall time of finished runs like it on this
machine; for a built-in model on a GPU, its training FLOPs (computed on the
host from the spec) at a stated share of the GPU's datasheet peak; a first
guess for a quick CPU run. Anything else is "unknown", never a made-up figure.
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from reprokit.kits.contract.spec import RunSpec, ScriptSpec, Spec
from reprokit.plan import model_cost
from reprokit.results import utilisation

FIRST_GUESS_S = {"quick": 30.0}   # a quick CPU run, start-up included, before any has finished here
ENV_BUILD_S = 60.0                # building a framework environment or image, once
GPU_SHARE = 0.35                  # of the datasheet peak a first GPU run is assumed to reach
START_S = 20.0                    # framework import, data load, model build, warmup on a GPU
MEASURED = "median of"            # how an estimate from finished runs begins (reprokit/plan/cost.py counts them)


def precision(spec: RunSpec) -> str:
    n = spec.numerics
    mixed = {"bf16_mixed": "bf16", "fp16_mixed": "fp16"}.get(n.precision)
    return mixed or ("tf32" if n.tf32 else "fp32")


def samples(spec: RunSpec) -> tuple[int, int]:
    """(training samples, evaluation samples) over the whole run."""
    train, data = spec.train, spec.data
    per_epoch = data.train_samples // train.batch_size
    if train.max_steps_per_epoch:
        per_epoch = min(per_epoch, train.max_steps_per_epoch)
    return train.epochs * per_epoch * train.batch_size, train.epochs * data.test_samples


def devices(spec: Spec) -> int:
    """The devices a run holds: its spec's count (--devices, or an experiment's device_counts)."""
    return spec.devices


def at_devices(spec: Spec, n: int) -> Spec:
    """The spec at n devices, a script's or a kit run's, its batch unchanged: the estimate of a run at N that
    has not run at N here is that of its run at one device (``seconds``)."""
    if n == spec.devices:
        return spec
    return dataclasses.replace(spec, devices=n, run_id="")


def seconds(spec: Spec, history: list[dict[str, Any]], gpu_name: str | None) -> tuple[float | None, str]:
    """(estimate, how it was made) for one run. A run at N devices that has not run at N here is estimated as its
    run at one device: no speed-up over N = 1, an upper bound on its time (unless N devices are slower than one)."""
    def walls(keys: tuple[str, ...]) -> list[float]:
        return [r["launcher"]["wall_s"] for r in history
                if r["status"] == "ok" and r.get("launcher", {}).get("wall_s")
                and all(r[k] == getattr(spec, k) for k in keys)
                and int((r.get("spec") or {}).get("devices", 1)) == devices(spec)]
    same = walls(("experiment", "framework", "variant", "profile")) or walls(("experiment", "framework", "profile"))
    if same:
        return statistics.median(same), f"{MEASURED} {len(same)} finished run(s) like it here"
    if devices(spec) > 1:
        at_one, how = seconds(at_devices(spec, 1), history, gpu_name)
        return at_one, f"{how}, at 1 device: no speed-up assumed"
    if isinstance(spec, ScriptSpec):
        return (None, "unknown: a script's cost is known once it ran") if spec.profile != "quick" else \
            (FIRST_GUESS_S["quick"], "first-run guess")
    if spec.device == "gpu":
        flops = model_cost.training_flops_per_sample(dataclasses.asdict(spec.model), spec.data.input_size)
        if flops is None:
            return None, "unknown: a custom model's FLOPs are counted when it first runs"
        peak, source = utilisation.device_peak(gpu_name or "unknown GPU", precision(spec))
        if not peak:
            return None, f"unknown: {source}"
        trained, evaluated = samples(spec)
        work = flops * (trained + evaluated / 3)          # evaluation is the forward third
        return START_S + work / (peak * GPU_SHARE), f"training FLOPs at {GPU_SHARE:.0%} of {source}"
    guess = FIRST_GUESS_S.get(spec.profile)
    return (guess, "first-run guess") if guess else (None, "unknown: no finished run like it here yet")

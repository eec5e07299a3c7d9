"""Turn the loop's measurements into the result file's sections."""
from __future__ import annotations

from typing import Any

import numpy as np

from reprokit.kits.contract.spec import RunSpec, ScriptSpec
from reprokit.kits.framework_free.measure import step_stats
from reprokit.kits.measurement.phases import WARMUP, PhaseMemory
from reprokit.kits.training_loop.training import Measurements


def sections(spec: RunSpec, m: Measurements, wall_s: float, input_reader: str, metrics_source: str,
             configured: int | None = None) -> dict[str, Any]:
    """``configured``: the batch this process takes (a DDP rank's share); by default the spec's."""
    out = _sections(configured or spec.train.batch_size, spec.train.warmup_steps, m, wall_s, input_reader,
                    metrics_source)
    out["timing"].update(_time_to_target(spec, m))
    return out


def script_sections(spec: ScriptSpec, m: Measurements, wall_s: float, input_reader: str,
                    configured: int) -> dict[str, Any]:
    """A probed script's sections, the same as a kit run's: ``configured`` is the batch size its training
    loader declared (or, without one, the size most of its steps received)."""
    return _sections(configured, spec.warmup_steps, m, wall_s, input_reader,
                     "the probe's own count, per sample, from the loss's inputs (the script prints its own)")


def _sections(configured: int, warmup: int, m: Measurements, wall_s: float, input_reader: str,
              metrics_source: str) -> dict[str, Any]:
    sizes = np.asarray(m.observed_batch_sizes or [0])
    train_s = m.measured_train_s
    return {
        "effective": {
            "input": input_reader,
            "batch_size": {"configured": configured, "min": int(sizes.min()),
                           "max": int(sizes.max()), "mean": float(sizes.mean()),
                           "short_steps": int((sizes < configured).sum()) if m.observed_batch_sizes else 0},
            "train_samples_per_epoch": m.samples_per_epoch,
            "train_steps_per_epoch": m.steps_per_epoch,
            "test_samples": m.test_samples,
            "test_steps": m.test_steps,
            "eval_batch_sizes": m.eval_batch_sizes,
        },
        "timing": {
            "method": (f"throughput: training wall time after warmup, device synchronised at its edges; "
                       f"steps: {m.step_timing}"),
            "warmup_steps": warmup,
            "warmup_eval_batch_sizes": m.warmed_eval_sizes,
            # every shape's first step and the warmup steps, device synchronised: a compiled step's compilation
            **({"warmup_s": m.warmup_s} if m.warmup_s is not None else {}),
            "window_steps": m.window_steps,
            "wall_s": wall_s,
            "epochs": m.epoch_times,
            "step_s": step_stats(m.step_s),
            "samples_per_s": m.measured_samples / train_s if train_s > 0 else 0.0,
            "data_wait_fraction": min(1.0, m.data_wait_s / train_s) if train_s > 0 else 0.0,
            **({"co_load": m.co_load} if m.co_load else {}),
            **({"energy": m.energy} if m.energy else {}),
        },
        # The reported figures, and the kit's own count from the outputs it observed, which judges them.
        "metrics": {"averaged_over": m.averaged_over, "reported_by": metrics_source, "epochs": m.epoch_metrics,
                    "counted": m.counted},
    }


def memory_section(phases: PhaseMemory, m: Measurements, series: str, device: dict[str, Any] | None) -> dict[str, Any]:
    """The memory section: every phase's peaks, and each reading's highest over the training and
    evaluation phases (warmup left out), the first counter's as the run's reported peak."""
    peaks = phases.peaks()
    first = next(iter(phases.records[0]["readings"]), None) if phases.records else None
    top = peaks.get(first, {}) if first is not None else {}
    warmup = [p["peak_bytes"] for p in phases.records if p["phase"] == WARMUP and p["peak_bytes"] is not None]
    framework: dict[str, Any] = {}
    out: dict[str, Any] = {"peak_bytes": top.get("peak_bytes"),
           "source": (f"{top['source']}; the highest over the training and evaluation phases, warmup left out"
                      if top else "no phase peak was read"),
           "warmup_peak_bytes": max(warmup) if warmup else None,
           "phases": phases.records, "over_steps": [list(p) for p in m.memory_over_steps],
           "over_steps_series": series, "framework": framework}
    if "allocated" in peaks:
        framework["peak_allocated"] = peaks["allocated"]["peak_bytes"]
    if "reserved" in peaks:
        framework["peak_reserved"] = peaks["reserved"]["peak_bytes"]
    if "process" in peaks:
        out["process_peak_bytes"] = peaks["process"]["peak_bytes"]
    if device is not None:
        # NVML's peak over the phases after warmup; where NVML could not say, its reason
        found = peaks.get("device")
        framework.update({"device_peak_bytes": found["peak_bytes"] if found else None,
                          "device_source": found["source"] if found else device["device_source"]})
        if device.get("device_baseline_bytes") is not None:
            framework["device_baseline_bytes"] = device["device_baseline_bytes"]
    return out


def _time_to_target(spec: RunSpec, m: Measurements) -> dict[str, Any]:
    """Training time (evaluation excluded) until held-out accuracy first reached the spec's target."""
    target = spec.train.target_accuracy
    if target is None:
        return {}
    elapsed = 0.0
    for times, metrics in zip(m.epoch_times, m.epoch_metrics):
        elapsed += times["train_s"]
        if metrics["test_accuracy"] is not None and metrics["test_accuracy"] >= target:
            return {"target_accuracy": target, "time_to_target_s": elapsed, "epochs_to_target": metrics["epoch"]}
    return {"target_accuracy": target, "time_to_target_s": None, "epochs_to_target": None}

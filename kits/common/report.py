"""Turn the loop's measurements into the result file's sections."""
from __future__ import annotations

import numpy as np

from kits.common.measure import step_stats
from kits.common.spec import RunSpec
from kits.common.training import Measurements

SCHEMA = "reprokit.result/1"


def header(spec: dict, status: str, failure: dict | None) -> dict:
    """The result's identity, with the spec as the host wrote it (JSON)."""
    return {
        "schema": SCHEMA,
        "run_id": spec["run_id"],
        "experiment": spec["experiment"],
        "variant": spec["variant"],
        "framework": spec["framework"],
        "profile": spec["profile"],
        "repeat": spec["repeat"],
        "status": status,
        "failure": failure,
        "spec": spec,
    }


def sections(spec: RunSpec, m: Measurements, wall_s: float, input_reader: str, metrics_source: str) -> dict:
    sizes = np.asarray(m.observed_batch_sizes or [0])
    train_s = m.measured_train_s
    return {
        "effective": {
            "input": input_reader,
            "batch_size": {"configured": spec.train.batch_size, "min": int(sizes.min()),
                           "max": int(sizes.max()), "mean": float(sizes.mean()),
                           "short_steps": int((sizes < spec.train.batch_size).sum()) if m.observed_batch_sizes else 0},
            "train_samples_per_epoch": m.samples_per_epoch,
            "train_steps_per_epoch": m.steps_per_epoch,
            "test_samples": m.test_samples,
            "test_steps": m.test_steps,
            "eval_batch_sizes": m.eval_batch_sizes,
        },
        "timing": {
            "method": (f"throughput: training wall time after warmup, device synchronised at its edges; "
                       f"steps: {m.step_timing}"),
            "warmup_steps": spec.train.warmup_steps,
            "warmup_eval_batch_sizes": m.warmed_eval_sizes,
            "window_steps": m.window_steps,
            "wall_s": wall_s,
            "epochs": m.epoch_times,
            "step_s": step_stats(m.step_s),
            "samples_per_s": m.measured_samples / train_s if train_s > 0 else 0.0,
            "data_wait_fraction": min(1.0, m.data_wait_s / train_s) if train_s > 0 else 0.0,
            **_time_to_target(spec, m),
        },
        # The reported figures, and the kit's own count from the outputs it observed, which judges them.
        "metrics": {"averaged_over": m.averaged_over, "reported_by": metrics_source, "epochs": m.epoch_metrics,
                    "counted": m.counted},
    }


def _time_to_target(spec: RunSpec, m: Measurements) -> dict:
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

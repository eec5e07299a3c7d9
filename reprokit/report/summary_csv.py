"""summary.csv: one flat row per run, beside the report, for a spreadsheet or pandas.

Figures are in base units (seconds, bytes, fractions), read through ``metrics``; an empty cell
is a quantity the run did not measure, never a zero.
"""
from __future__ import annotations

import csv
from pathlib import Path

from reprokit.report import metrics
from reprokit.report.metrics import NotMeasured
from reprokit.report.runs import order

# (column, dotted field of the result) for what identifies a run
IDENTITY = (("run_id", "run_id"), ("experiment", "experiment"), ("variant", "variant"), ("framework", "framework"),
            ("profile", "profile"), ("repeat", "repeat"), ("status", "status"), ("failure", "failure.kind"),
            ("device", "spec.device"), ("device_name", "environment.device_name"),
            ("framework_version", "environment.framework_version"), ("code_commit", "provenance.code_commit"),
            ("code_dirty", "provenance.code_dirty"))
QUANTITIES = ("samples_per_s", "step_time_p50_s", "step_time_p95_s", "train_time_per_epoch_s",
              "eval_time_per_epoch_s", "total_time_s", "data_wait_fraction", "mfu", "time_to_target_s",
              "peak_memory_bytes", "train_peak_memory_bytes", "eval_peak_memory_bytes", "memory_growth",
              "effective_batch_size", "train_samples_per_epoch", "final_train_accuracy", "final_test_accuracy",
              "final_train_loss", "final_test_loss", "parameters")


def row(r: dict) -> dict[str, object]:
    out: dict[str, object] = {}
    for column, path in IDENTITY:
        try:
            out[column] = metrics.field(r, path)
        except NotMeasured:
            out[column] = ""
    for name in QUANTITIES:
        try:
            got = metrics.read(r, name)
        except NotMeasured:
            out[name] = ""
            continue
        out[name] = got.value
        if name == "peak_memory_bytes":
            out["peak_memory_source"] = got.source
    out.setdefault("peak_memory_source", "")
    return out


def write(path: Path, results: list[dict]) -> Path:
    columns = [c for c, _ in IDENTITY] + [q for q in QUANTITIES] + ["peak_memory_source"]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in sorted(results, key=order):
            writer.writerow(row(r))
    return path

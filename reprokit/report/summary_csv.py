"""summary.csv: one flat row per run, beside the report, for a spreadsheet or pandas.

Figures are in base units (seconds, bytes, fractions), read through ``metrics``; an empty cell
is a quantity the run did not measure, never a zero.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from reprokit.kits.contract.files import atomic_file
from reprokit.results import metrics
from reprokit.results.metrics import NotMeasured
from reprokit.results.runs import order

# (column, dotted field of the result) for what identifies a run
IDENTITY = (("run_id", "run_id"), ("experiment", "experiment"), ("variant", "variant"), ("framework", "framework"),
            ("profile", "profile"), ("repeat", "repeat"), ("status", "status"), ("failure", "failure.kind"),
            ("device", "spec.device"), ("device_name", "environment.device_name"),
            ("framework_version", "environment.framework_version"), ("code_commit", "provenance.code_commit"),
            ("code_dirty", "provenance.code_dirty"))
# (column, quantity) for the quantities that are columns, in metrics' order; after them, what their readings are
QUANTITIES = tuple((q.column, q) for q in metrics.QUANTITIES.values() if q.column)
SOURCES = tuple(q.source_column for _, q in QUANTITIES if q.source_column)


def row(r: dict[str, Any]) -> dict[str, object]:
    out: dict[str, object] = {}
    for column, path in IDENTITY:
        try:
            out[column] = metrics.field(r, path)
        except NotMeasured:
            out[column] = ""
    for column, q in QUANTITIES:
        try:
            got = metrics.read(r, q.name)
        except NotMeasured:
            got = None
        out[column] = got.value if got else ""
        if q.source_column:
            out[q.source_column] = got.source if got else ""
    return out


def write(path: Path, results: list[dict[str, Any]]) -> Path:
    columns = [c for c, _ in IDENTITY] + [c for c, _ in QUANTITIES] + list(SOURCES)
    with atomic_file(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in sorted(results, key=order):
            writer.writerow(row(r))
    return path

"""A metric is one definition (metrics.QUANTITIES): the report's rows, summary.csv's columns and the claims
schema's quantity enum all come from it, and the kit's step timer is a Tracker (start, stop, report)."""
from __future__ import annotations

import json
import re

import pytest

from reprokit.claims import claims, claims_schema
from reprokit.kits.framework_free.measure import NoStepTimer, Tracker, WindowTimer
from reprokit.report import sections, summary_csv
from reprokit.results import metrics, units


def test_the_claims_schema_quantity_enum_is_written_from_the_quantities():
    text = claims_schema.SCHEMA.read_text()
    assert json.loads(text)["$defs"]["quantity"]["enum"] == list(metrics.QUANTITIES), \
        f"reprokit/schemas/claims.schema.json's quantity enum is not metrics.QUANTITIES; run: {claims.REGENERATE}"
    assert claims_schema.schema_text(text) == text, f"claims.schema.json is not as its generator writes it; run: {claims.REGENERATE}"


def test_the_schema_generator_rewrites_the_enum_only():
    text = claims_schema.SCHEMA.read_text()
    stale = re.sub(r'"parameters"\n', '"parameters", "leakiness"\n', text, count=1)
    assert json.loads(stale)["$defs"]["quantity"]["enum"][-1] == "leakiness"
    written = json.loads(claims_schema.schema_text(stale))
    assert written["$defs"]["quantity"]["enum"] == list(metrics.QUANTITIES)
    assert written == json.loads(text)
    with pytest.raises(ValueError, match="no quantity enum"):
        claims_schema.schema_text('{"$defs": {}}')


def test_summary_csv_columns_and_their_order_are_the_files_contract():
    """Scripts read summary.csv: its header is pinned here, whatever order the definitions take."""
    assert [c for c, _ in summary_csv.QUANTITIES] == [
        "samples_per_s", "step_time_p50_s", "step_time_p95_s", "train_time_per_epoch_s", "eval_time_per_epoch_s",
        "total_time_s", "data_wait_fraction", "mfu", "time_to_target_s", "peak_memory_bytes",
        "train_peak_memory_bytes", "eval_peak_memory_bytes", "memory_growth", "effective_batch_size",
        "train_samples_per_epoch", "final_train_accuracy", "final_test_accuracy", "final_train_loss",
        "final_test_loss", "energy_per_sample_j", "parameters"]
    assert summary_csv.SOURCES == ("peak_memory_source",)
    columns = [c for c, _ in summary_csv.IDENTITY] + [c for c, _ in summary_csv.QUANTITIES] + list(summary_csv.SOURCES)
    assert len(columns) == len(set(columns))


def test_the_report_places_every_row_a_quantity_defines_once():
    assert len(sections.SIDE_BY_SIDE) == len(set(sections.SIDE_BY_SIDE))
    assert set(sections.SIDE_BY_SIDE) == {q.name for q in metrics.QUANTITIES.values() if q.row}


def test_each_quantity_has_a_known_dimension_and_readings():
    dimensions = {d for d, _ in units.UNITS.values()} | {"loss", "count"}
    for q in metrics.QUANTITIES.values():
        assert q.dimension in dimensions, q.name
        assert q.readings[0] == "reported" and set(q.readings) <= set(metrics.READINGS), q.name
    assert claims.MEMORY_PEAKS == ("peak_memory_bytes", "warmup_peak_memory_bytes", "train_peak_memory_bytes",
                                   "eval_peak_memory_bytes")


def test_a_reading_a_quantity_does_not_have_is_refused():
    with pytest.raises(ValueError, match="samples_per_s has no 'device' reading; it has: reported"):
        metrics.read({"status": "ok"}, "samples_per_s", "device")


def test_values_are_written_as_each_quantity_says():
    assert metrics.show("memory_growth", 0.123) == "+12.3%"
    assert metrics.show("mfu", 0.5) == metrics.show("data_wait_fraction", 0.5) == "50.0%"
    assert metrics.show("step_time_p50_s", 0.0123) == "12.3 ms" == units.fmt(0.0123, "time")
    assert metrics.QUANTITIES["step_time_p50_s"].row.cell(0.0123) == "12.3"


# --- the kit's step timers, as Trackers ----------------------------------------------------------

def test_the_window_timer_reports_full_windows_only():
    syncs = []
    timer = WindowTimer(2, lambda: syncs.append(1))
    timer.start()
    for _ in range(5):
        timer.tick()
    timer.stop()                    # the fifth step is no window
    timer.start()
    for _ in range(3):
        timer.tick()
    timer.stop()
    assert len(timer.report()) == 3 and all(s >= 0 for s in timer.report())
    assert len(syncs) == 2 + 3      # at each start and at each window's end, never at stop


def test_no_step_timer_measures_nothing():
    timer: Tracker = NoStepTimer()
    timer.start()
    timer.stop()
    assert timer.report() == [] and timer.method == "not taken (step instrumentation off)"

"""Energy over the timed window (reprokit/kits/measurement/energy.py): RAPL's package counters read from a powercap folder laid
out as Linux lays it out, wrap-arounds undone, sub-zones not counted twice; a host without RAPL says so in the
result of a real run (tests/test_kits.py); the report puts the reading (or the reason) beside throughput."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from checkout import REPO

from reprokit.kits.measurement import energy
from reprokit.report import sections


def _domain(root: Path, name: str, uj: int, top: int = 2**32) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "energy_uj").write_text(f"{uj}\n")
    (d / "max_energy_range_uj").write_text(f"{top}\n")
    return d


def test_rapl_sums_the_packages_undoes_a_wrap_and_leaves_out_their_parts(tmp_path):
    p0 = _domain(tmp_path, "intel-rapl:0", 1_000_000)
    p1 = _domain(tmp_path, "intel-rapl:1", 2**32 - 500_000)          # about to wrap
    _domain(tmp_path, "intel-rapl:0:0", 5)                            # the cores of package 0: inside it already
    reader = energy._Rapl(tmp_path)
    assert [d.name for d in reader.domains] == ["intel-rapl:0", "intel-rapl:1"]
    (p0 / "energy_uj").write_text("4000000\n")                        # +3 J
    (p1 / "energy_uj").write_text("1500000\n")                        # wrapped: +0.5 J + 1.5 J
    assert reader.joules() == pytest.approx(5.0)


def test_a_host_without_rapl_gives_the_reason(tmp_path):
    with pytest.raises(OSError, match="shows no RAPL energy counter"):
        energy._Rapl(tmp_path)


def test_the_side_by_side_table_shows_energy_beside_throughput_and_says_how_it_was_read():
    results = [json.loads(p.read_text()) for p in sorted((REPO / "reports" / "quick-cpu" / "results").glob("*.json"))]
    fixed = [r for r in results if r["variant"] == "fixed"]
    by_fw = {fw: [r for r in fixed if r["framework"] == fw] for fw in ("pytorch", "tensorflow")}
    measured = copy.deepcopy(by_fw)
    for r in measured["pytorch"]:         # as a GPU run writes it: 120 J over 1,000 samples
        r["timing"]["energy"] = {"method": energy._Gpu.method, "joules": 120.0, "window_s": 2.0, "samples": 1000,
                                 "joules_per_sample": 0.12, "mean_watts": 60.0, "scope": energy._Gpu.scope}
    table = sections.side_by_side(measured).splitlines()
    at = next(i for i, line in enumerate(table) if line.startswith("| throughput"))
    assert table[at + 1].startswith("| energy per training sample (J, timed window)")
    assert "| 0.12 " in table[at + 1] and "not measured" in table[at + 1]       # TensorFlow's older result
    note = sections.energy_note(measured)
    assert "PyTorch: NVML total-energy counter" in note and "TensorFlow: this result has no timing.energy" in note       # a kit older than the reading

"""nvidia-smi parsing (reprokit/kits/framework_free/nvidia_smi.py) on outputs recorded from real drivers.

The recordings are in tests/fixtures/nvidia_smi/ (SOURCES.md says where each came from):
R465 (clocks_throttle_reasons only, no compute_cap), R535 (both names), R590 (H100; H200 in MIG
mode). The end-to-end tests replay them through a stand-in nvidia-smi on PATH.
"""
from __future__ import annotations

import pytest
from conftest import NVIDIA_SMI_CAPTURES as CAPTURES

from reprokit.kits.framework_free import nvidia_smi


def _help(capture: str) -> set[str]:
    return nvidia_smi.help_fields((CAPTURES / capture / "help-query-gpu.txt").read_text())


@pytest.mark.parametrize("capture, reasons, compute_cap", [
    ("465.27-rtx2080super", "clocks_throttle_reasons.active", None),
    ("535.129.03-a100", "clocks_event_reasons.active", "compute_cap"),
    ("590.48.01-h100", "clocks_event_reasons.active", "compute_cap"),
])
def test_fields_are_chosen_from_what_the_driver_lists(capture, reasons, compute_cap):
    chosen = nvidia_smi.choose({**nvidia_smi.STATE, **nvidia_smi.FACTS}, _help(capture))
    assert chosen["event_reasons"] == reasons
    assert chosen.get("compute_capability") == compute_cap
    assert chosen["uuid"] == "uuid" and chosen["clocks_sm_mhz"] == "clocks.sm"


def test_the_old_name_is_an_alias_on_new_drivers():
    for capture in ("535.129.03-a100", "590.48.01-h100"):
        assert {"clocks_throttle_reasons.active", "clocks_event_reasons.active", "compute_cap"} <= _help(capture)
    assert "clocks_event_reasons.active" not in _help("465.27-rtx2080super")


def test_without_a_field_list_the_first_names_are_asked():
    assert nvidia_smi.choose({"event_reasons": ("a", "b")}, set()) == {"event_reasons": "a"}


def test_recorded_csv_reads_leniently():
    (old,) = nvidia_smi.rows((CAPTURES / "465.27-rtx2080super" / "query-gpu.csv").read_text())
    assert old["name"] == "NVIDIA GeForce RTX 2080 SUPER" and old["driver_version"] == "465.27"
    assert old["serial"] is None and old["temperature.memory"] is None       # "[N/A]" and a bare "N/A"
    assert nvidia_smi.bitmask(old["clocks_throttle_reasons.active"]) == 0x1  # idle
    assert nvidia_smi.number(old["memory.used"]) == 344 and nvidia_smi.number(old["power.draw"]) == 30.37
    (new,) = nvidia_smi.rows((CAPTURES / "590.48.01-h100" / "query-gpu.csv").read_text())
    assert new["name"] == "NVIDIA H100 80GB HBM3" and new["compute_cap"] == "9.0"
    assert nvidia_smi.bitmask(new["clocks_event_reasons.active"]) == 0
    assert "clocks_throttle_reasons.active" not in new


@pytest.mark.parametrize("text, expected", [
    ("[N/A]", None), ("N/A", None), ("[Not Supported]", None), ("[Unknown Error]", None),
    ("[Insufficient Permissions]", None), ("", None), (" 9.0 ", "9.0"), ("Not Active", "Not Active"),
])
def test_cells_without_a_value_are_none(text, expected):
    assert nvidia_smi.value(text) == expected


def test_numbers_and_masks_from_any_cell():
    assert nvidia_smi.number("1980 MHz") == 1980 and nvidia_smi.number("[Not Supported]") is None
    assert nvidia_smi.number("P0") is None
    assert nvidia_smi.bitmask("0x0000000000000044") == 0x44 and nvidia_smi.bitmask("Active") is None


def test_compute_apps_carry_the_gpu_uuid_even_on_mig():
    apps = nvidia_smi.rows((CAPTURES / "590.48.01-h200-mig" / "query-compute-apps.csv").read_text())
    assert [a["pid"] for a in apps] == ["12249", "12250", "12267"]
    assert {a["gpu_uuid"] for a in apps} == {"GPU-00000000-0000-0000-0000-000000000000"}
    assert nvidia_smi.number(apps[2]["used_gpu_memory"]) == 13526


@pytest.mark.parametrize("capture, names, migs", [
    ("a100-sxm4-80gb-mig", ["NVIDIA A100-SXM4-80GB"] * 4, [4, 0, 0, 0]),
    ("590.48.01-h200-mig", ["NVIDIA H200"], [5]),
    ("t1000-v100-pcie", ["NVIDIA T1000", "Tesla V100-PCIE-16GB"], [0, 0]),
    ("465.27-rtx2080super", ["NVIDIA GeForce RTX 2080 SUPER"], [0]),
])
def test_the_listing_names_gpus_and_their_mig_devices(capture, names, migs):
    found = nvidia_smi.listing((CAPTURES / capture / "list.txt").read_text())
    assert [g["name"] for g in found] == names and [len(g["mig"]) for g in found] == migs
    assert all(g["uuid"].startswith("GPU-") for g in found)
    assert all(m["uuid"].startswith("MIG-") for g in found for m in g["mig"])


def test_mig_uuids_and_profiles_from_a_real_listing():
    (first, *_) = nvidia_smi.listing((CAPTURES / "a100-sxm4-80gb-mig" / "list.txt").read_text())
    assert first["uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert first["mig"][1] == {"profile": "MIG 1g.20gb", "device": "1", "uuid": "MIG-a45882f0-9215-5733-a0c1-49286ab31cb5"}


@pytest.mark.parametrize("capture, expected", [
    ("465.27-rtx2080super", {"name": "NVIDIA GeForce RTX 2080 SUPER", "driver": "465.27", "compute_capability": None,
                             "memory_mib": "7979", "pci_bus_id": "00000000:0C:00.0"}),
    ("590.48.01-h100", {"name": "NVIDIA H100 80GB HBM3", "driver": "590.48.01", "compute_capability": "9.0",
                        "memory_mib": "81559", "pci_bus_id": "00000000:00:09.0"}),
])
def test_gpus_through_a_replayed_driver(nvidia_smi_replay, capture, expected):
    nvidia_smi_replay(capture)
    (gpu,) = nvidia_smi.gpus()
    assert {k: gpu[k] for k in expected} == expected and gpu["uuid"].startswith("GPU-")
    (state,) = nvidia_smi.query("gpu", nvidia_smi.STATE)
    assert state["event_reasons"].startswith("0x") and nvidia_smi.number(state["clocks_max_sm_mhz"]) > 0


def test_a_field_the_driver_does_not_know_is_never_asked(nvidia_smi_replay):
    nvidia_smi_replay("465.27-rtx2080super")
    # the replay refuses unknown fields exactly as the driver does; the query must still succeed
    assert nvidia_smi.query("gpu", {"x": ("clocks_event_reasons.active", "clocks_throttle_reasons.active")}) == [
        {"x": "0x0000000000000001"}]


def test_no_driver_is_none(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert nvidia_smi.gpus() is None and nvidia_smi.devices() is None

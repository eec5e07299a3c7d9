"""The kit's NVML sampler against a stand-in libnvidia-ml built from tests/fixtures/fake_nvml.c.

The stand-in has NVML's C signatures, three GPUs and a MIG device, so the sampler's real ctypes
calls run: finding the framework's device by UUID or PCI bus id (never device 0 blindly), the
clock-event reasons sampled while training (slowdowns apart from power management), both names of
that call, a MIG-mode GPU whose own memory a user may not read, and an NVML failure.
"""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from reprokit.kits.framework_free.nvml import DeviceSampler
from reprokit.kits.measurement.energy import Energy

SOURCE = Path(__file__).parent / "fixtures" / "fake_nvml.c"


@pytest.fixture
def nvml(tmp_path):
    """Build a fresh stand-in library (fresh counters) with or without the R535 call name and nvmlDeviceGetMigMode."""
    def build(event_name: bool = True, mig_mode: bool = True) -> str:
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            pytest.skip("no C compiler to build the stand-in libnvidia-ml")
        out = tmp_path / f"libnvidia-ml-{event_name}-{mig_mode}.so"
        flags = [*(["-DEVENT_NAME"] if event_name else []), *([] if mig_mode else ["-DNO_MIG_MODE"])]
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(SOURCE), *flags], check=True, capture_output=True)
        return str(out)
    return build


def _sample(sampler: DeviceSampler, seconds: float = 0.05) -> tuple[dict, dict]:
    time.sleep(seconds)
    return sampler.stop(), sampler.report()


@pytest.mark.parametrize("event_name", [True, False], ids=["R535+ name", "throttle name"])
def test_the_framework_uuid_picks_the_device_and_clock_events_are_read_during_the_run(nvml, event_name):
    sampler = DeviceSampler(interval_s=0.005, library=nvml(event_name))
    # CUDA's UUID has no "GPU-" prefix (torch.cuda.get_device_properties(i).uuid); device 2, not 0
    sampler.watch("44444444-4444-4444-4444-444444444444")
    memory, report = _sample(sampler)
    assert report["uuid"] == "GPU-44444444-4444-4444-4444-444444444444" and report["unavailable"] is None
    assert report["name"] == "NVIDIA H200" and "UUID" in report["found_by"]
    # the baseline is device 2's (300 MiB + its first reading), the peak what the run added on it
    assert memory["device_baseline_bytes"] == (300 + 1) << 20
    assert memory["device_peak_bytes"] == (report["clock_events"]["samples"] + 1) << 20
    events = report["clock_events"]
    # its reasons are 0x44: the hardware thermal slowdown counts as a slowdown, the power cap apart
    assert events["samples"] >= 3 and events["slowdown_samples"]["hardware thermal slowdown"] == events["samples"]
    assert sum(events["slowdown_samples"].values()) == events["samples"]
    assert events["power_samples"] == {"software power cap": events["samples"]}


def test_a_mig_device_is_watched_by_its_uuid_with_its_gpus_clocks(nvml):
    sampler = DeviceSampler(interval_s=0.005, library=nvml())
    sampler.watch("33333333-3333-3333-3333-333333333333")
    memory, report = _sample(sampler)
    assert report["uuid"].startswith("MIG-33333333") and report["name"].endswith("MIG 1g.10gb")
    assert memory["device_baseline_bytes"] == (10 + 1) << 20
    assert report["clock_events"]["slowdown_samples"]["hardware thermal slowdown"] > 0   # the parent GPU's
    assert report["clock_events"]["power_samples"]["software power cap"] == 0


def test_tensorflow_finds_its_gpu_by_pci_bus_id_but_not_a_mig_device(nvml):
    lib = nvml()
    sampler = DeviceSampler(interval_s=0.005, library=lib)
    sampler.watch(pci_bus_id="0000:01:00.0")
    _, report = _sample(sampler)
    assert report["uuid"] == "GPU-11111111-1111-1111-1111-111111111111" and "PCI bus id" in report["found_by"]
    assert report["clock_events"]["slowdown_samples"]["hardware thermal slowdown"] == 0
    sampler = DeviceSampler(library=lib)
    sampler.watch(pci_bus_id="0000:02:00.0", mig=True)
    memory, report = _sample(sampler, 0)
    assert memory["device_peak_bytes"] is None and "reports only its GPU's PCI bus id" in memory["device_source"]
    assert report["uuid"] is None and report["unavailable"] == memory["device_source"]


def test_an_unknown_device_or_none_named_is_said_not_guessed(nvml):
    lib = nvml()
    for kwargs, reason in (({"uuid": "99999999-9999-9999-9999-999999999999"}, "Not Found"),
                           ({}, "named no device")):
        sampler = DeviceSampler(library=lib)
        sampler.watch(**kwargs)
        memory, report = _sample(sampler, 0)
        assert memory["device_peak_bytes"] is None and reason in memory["device_source"]
        assert report["uuid"] is None


@pytest.mark.parametrize("mig_mode", [True, False], ids=["MIG mode read", "driver without nvmlDeviceGetMigMode"])
def test_a_mig_gpus_own_memory_denied_to_the_user_leaves_its_mig_device_and_the_other_gpus(nvml, monkeypatch,
                                                                                         mig_mode):
    monkeypatch.setenv("FAKE_NVML_MIG_PARENT_DENIED", "1")    # NVML's NO_PERMISSION for GPU 1's own memory
    lib = nvml(mig_mode=mig_mode)
    sampler = DeviceSampler(interval_s=0.005, library=lib)
    sampler.watch("33333333-3333-3333-3333-333333333333")
    memory, report = _sample(sampler)
    assert report["unavailable"] is None and report["uuid"].startswith("MIG-33333333")
    assert memory["device_baseline_bytes"] == (10 + 1) << 20 and memory["device_peak_bytes"] > 0
    assert report["clock_events"]["slowdown_samples"]["hardware thermal slowdown"] > 0   # the parent's clocks
    sampler = DeviceSampler(interval_s=0.005, library=lib)
    sampler.watch(pci_bus_id="0000:01:00.0")
    memory, report = _sample(sampler)
    assert report["unavailable"] is None and report["uuid"].startswith("GPU-11111111")
    assert memory["device_peak_bytes"] > 0 and report["clock_events"]["samples"] >= 1


@pytest.mark.parametrize("mig_mode, reason", [
    (True, "the GPU is in MIG mode, where runs use its MIG devices"),
    (False, "nvmlDeviceGetMemoryInfo: Insufficient Permissions")], ids=["MIG mode read", "read and refused"])
def test_a_watched_device_without_a_baseline_says_so(nvml, monkeypatch, mig_mode, reason):
    monkeypatch.setenv("FAKE_NVML_MIG_PARENT_DENIED", "1")
    sampler = DeviceSampler(interval_s=0.005, library=nvml(mig_mode=mig_mode))
    sampler.watch("22222222-2222-2222-2222-222222222222")
    memory, report = _sample(sampler, 0)
    assert memory == {"device_peak_bytes": None,
                      "device_source": f"NVML could not read GPU-22222222-2222-2222-2222-222222222222's memory before "
                                       f"the run ({reason}), so the run's device memory is unknown"}
    assert report["unavailable"] == memory["device_source"] and report["name"] == "NVIDIA A100-SXM4-80GB"


def test_an_nvml_error_during_the_run_marks_the_sampler_unavailable(nvml, monkeypatch):
    # 3 baselines (GPU 0, the MIG device, GPU 2; GPU 1 is in MIG mode, its own memory is not read) + the first
    # reading, then a few samples
    monkeypatch.setenv("FAKE_NVML_FAIL_AFTER", "8")
    sampler = DeviceSampler(interval_s=0.005, library=nvml())
    sampler.watch("GPU-11111111-1111-1111-1111-111111111111")
    memory, report = _sample(sampler)                     # stop() must not raise
    assert memory == {"device_peak_bytes": None,
                      "device_source": "NVML failed during the run (nvmlDeviceGetMemoryInfo: GPU is lost)"}
    assert report["unavailable"] == memory["device_source"] and report["clock_events"]["samples"] >= 1


def test_without_nvml_the_sampler_says_so(tmp_path):
    sampler = DeviceSampler(library=str(tmp_path / "libnvidia-ml.so.1"))
    sampler.watch("22222222-2222-2222-2222-222222222222")
    memory = sampler.stop()
    assert memory["device_peak_bytes"] is None and memory["device_source"].startswith("NVML unavailable (")


def test_a_phase_peak_is_read_at_its_end_and_says_why_when_nvml_cannot(nvml, monkeypatch):
    sampler = DeviceSampler(interval_s=0.005, library=nvml())
    sampler.watch("44444444-4444-4444-4444-444444444444")
    phases = []
    for _ in range(2):
        sampler.reset()
        time.sleep(0.02)
        phases.append(sampler.read()["device"])
    memory, _ = _sample(sampler, 0)
    # the stand-in adds 1 MiB per reading, so each phase's peak is its last reading, above the one before
    assert [p["source"] for p in phases] == [DeviceSampler.PHASE_SOURCE] * 2
    assert 0 < phases[0]["peak_bytes"] < phases[1]["peak_bytes"] < memory["device_peak_bytes"]
    unwatched = DeviceSampler(library=str(Path("/nonexistent/libnvidia-ml.so.1")))
    unwatched.reset()
    assert unwatched.read()["device"]["peak_bytes"] is None
    assert unwatched.read()["device"]["source"].startswith("NVML unavailable (")


def test_the_energy_of_the_timed_window_is_the_watched_gpus_counter_and_a_mig_device_says_it_has_none(nvml):
    """Two timed windows on device 2, each 1.5 J by the stand-in's counter, over 300 samples; a MIG device has no
    counter of its own, which the reading says instead of a figure."""
    sampler = DeviceSampler(interval_s=0.005, library=nvml())
    sampler.watch("44444444-4444-4444-4444-444444444444")
    energy = Energy(sampler)
    for _ in range(2):
        energy.start()
        time.sleep(0.01)
        energy.stop()
    got = energy.report(samples=300)
    sampler.stop()
    assert got["joules"] == 3.0 and got["joules_per_sample"] == pytest.approx(0.01) and got["mean_watts"] > 0
    assert "nvmlDeviceGetTotalEnergyConsumption" in got["method"] and "whole GPU" in got["scope"]
    mig = DeviceSampler(interval_s=0.005, library=nvml())
    mig.watch("MIG-33333333-3333-3333-3333-333333333333", mig=True)
    on_mig = Energy(mig)
    on_mig.start()
    on_mig.stop()
    mig.stop()
    assert on_mig.report(samples=300) == {"method": got["method"], "joules": None,
                                          "why_not": "nvmlDeviceGetTotalEnergyConsumption: Not Supported"}

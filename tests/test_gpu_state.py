"""The host's view of the run's GPU, read through a stand-in nvidia-smi replaying real drivers'
outputs (tests/fixtures/nvidia_smi), and the clock-event reasons the kit sampled during the run."""
from __future__ import annotations

import copy

from reprokit.execute import gpu_state

H100 = "GPU-00000000-0000-0000-0000-000000000000"


def _result(uuid=None, samples=0, thermal=0, power_cap=0):
    """A result as the kit's sampler reports it (DeviceSampler.report()), slowdowns apart from power management."""
    return {"environment": {"nvml": {"uuid": uuid, "name": "NVIDIA H100 80GB HBM3", "clock_events": {
        "samples": samples, "slowdown_samples": {"hardware thermal slowdown": thermal, "hardware slowdown": 0},
        "power_samples": {"software power cap": power_cap}}}}}


def test_other_processes_on_the_runs_gpu_are_found_by_uuid(nvidia_smi_replay):
    nvidia_smi_replay("590.48.01-h100")
    state = gpu_state.snapshot()
    assert [g["name"] for g in state["gpus"]] == ["NVIDIA H100 80GB HBM3"]
    assert [p["pid"] for p in state["processes"]] == [11327, 11328, 11345]
    assert state["processes"][2] == {"pid": 11345, "gpu_uuid": H100, "used_memory_mib": 15690}
    (shared,) = gpu_state.findings(state, state, _result(H100))
    assert shared["code"] == "gpu-shared" and "11327, 11328, 11345" in shared["message"]
    assert "on the run's GPU" in shared["message"]
    # a run watched on another GPU does not inherit this GPU's processes
    assert gpu_state.findings(state, state, _result("GPU-ffffffff-0000-0000-0000-000000000000")) == []


def test_a_run_without_a_recorded_uuid_considers_every_gpu_and_says_so(nvidia_smi_replay):
    nvidia_smi_replay("590.48.01-h100")
    state = gpu_state.snapshot()
    (shared,) = gpu_state.findings(state, None, None)
    assert "every GPU is considered" in shared["message"]


def test_mig_runs_see_their_gpus_processes_with_the_caveat(nvidia_smi_replay):
    nvidia_smi_replay("590.48.01-h200-mig")
    state = gpu_state.snapshot()
    assert state["gpus"][0]["mig"][3] == "MIG-00000003-0000-0000-0000-000000000003"
    (shared,) = gpu_state.findings(state, state, _result("MIG-00000003-0000-0000-0000-000000000003"))
    assert "12249, 12250, 12267" in shared["message"] and "does not say which MIG device" in shared["message"]


def test_throttling_before_after_and_during_the_run(nvidia_smi_replay):
    nvidia_smi_replay("465.27-rtx2080super")          # the old clocks_throttle_reasons name
    state = gpu_state.snapshot()
    assert state["gpus"][0]["event_reasons"] == "0x0000000000000001" and state["processes"] == []
    assert gpu_state.findings(state, state, _result()) == []          # idle is not a slowdown
    hot = copy.deepcopy(state)
    hot["gpus"][0]["event_reasons"] = "0x0000000000000040"
    found = gpu_state.findings(state, hot, _result(samples=200, thermal=50))
    assert [f["code"] for f in found] == ["gpu-throttled", "gpu-throttled"]
    assert found[0]["message"].startswith("GPU 0 (NVIDIA GeForce RTX 2080 SUPER) after the run: hardware thermal")
    assert "during the run: hardware thermal slowdown in 25% of 200 samples" in found[1]["message"]
    unreadable = copy.deepcopy(state)
    unreadable["gpus"][0]["event_reasons"] = None                     # "[Not Supported]"
    assert gpu_state.findings(unreadable, unreadable, _result()) == []


def test_a_power_cap_is_information_and_heat_still_warns(nvidia_smi_replay):
    nvidia_smi_replay("590.48.01-h100")               # recorded under load, reasons 0x0
    state = gpu_state.snapshot()
    capped, hot = copy.deepcopy(state), copy.deepcopy(state)
    capped["gpus"][0]["event_reasons"] = "0x0000000000000004"
    hot["gpus"][0]["event_reasons"] = "0x0000000000000040"
    run = _result(H100, samples=200, power_cap=120)
    found = [f for f in gpu_state.findings(capped, hot, run) if f["code"] != "gpu-shared"]
    assert [(f["code"], f["severity"]) for f in found] == [
        ("gpu-power-capped", "info"), ("gpu-throttled", "warning"), ("gpu-power-capped", "info")]
    assert found[0]["message"].startswith("GPU 0 (NVIDIA H100 80GB HBM3) before the run: software power cap (SM clock")
    assert "routine under load, not a slowdown" in found[0]["message"]
    assert found[1]["message"].startswith("GPU 0 (NVIDIA H100 80GB HBM3) after the run: hardware thermal slowdown")
    assert "during the run: software power cap in 60% of 200 samples" in found[2]["message"]
    # a run whose samples show only the power cap, around quiet snapshots, gets no warning
    quiet = [f for f in gpu_state.findings(state, state, run) if f["code"] != "gpu-shared"]
    assert [(f["code"], f["severity"]) for f in quiet] == [("gpu-power-capped", "info")]
    during = gpu_state.findings(None, None, _result(H100, samples=200, thermal=10, power_cap=120))
    assert [(f["code"], f["severity"]) for f in during] == [("gpu-throttled", "warning"), ("gpu-power-capped", "info")]


def test_no_driver_means_no_state(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_state.snapshot() is None and gpu_state.findings(None, None) == []

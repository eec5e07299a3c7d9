"""A GPU run whose script keeps its model on the CPU is measured there, as the script chose (reprokit/kits/probe.py).

No GPU here: the finding's rule is checked on NVML readings as the sampler reports them, and the report's
label on results as the probe writes them. The run itself is scripts/gpu_check's step on a lent GPU; on this
host a GPU spec still stops at the first step, the run seeing no GPU (tests/test_probe.py).
"""
from __future__ import annotations

from reprokit.kits.observation import detectors
from reprokit.report.markdown import device_label

SOURCE = "nvmlDeviceGetUtilizationRates, sampled every 20 ms in the training phases"


def test_the_finding_gives_the_idle_share_nvml_sampled_and_names_the_gpu():
    idle = {"samples": 240, "idle_samples": 228, "mean_percent": 1.5, "unread": None, "source": SOURCE}
    (found,) = detectors.model_not_on_gpu("pytorch", "NVIDIA H200", idle, None)
    assert found["code"] == "model-not-on-gpu" and found["severity"] == "warning"
    assert found["message"].startswith("the script's pytorch model trained on the CPU while a GPU was available "
                                       "(NVIDIA H200): the run is measured on the CPU, as the script chose")
    assert "idle (utilisation 0%) in 228 of 240 samples (95%) over the measured training steps" in found["message"]
    # NVML could not say which GPU CUDA shows first: the idle time is said to be unmeasured, with why
    (unsure,) = detectors.model_not_on_gpu("jax", None, {"samples": 0, "idle_samples": 0, "mean_percent": None},
                                           "NVML could not find the first visible GPU (CUDA numbers GPUs ...)")
    assert "(the first visible GPU)" in unsure["message"]
    assert unsure["message"].endswith("its idle time was not measured (NVML could not find the first visible GPU "
                                      "(CUDA numbers GPUs ...))")


def _result(framework: str, device: str, findings: list[dict]) -> dict:
    return {"framework": framework, "status": "ok", "spec": {"device": "gpu"},
            "environment": {"device": device}, "findings": findings}


def test_the_report_labels_a_run_on_the_cpu_as_such():
    (found,) = detectors.model_not_on_gpu("pytorch", "NVIDIA H200", None, "NVML took no sample")
    on_gpu = _result("tensorflow", "gpu", [])
    assert device_label([on_gpu]) == "gpu"
    assert device_label([on_gpu, _result("pytorch", "cpu", [found])]) == (
        "gpu; pytorch trained on the CPU, its model never on the GPU (model-not-on-gpu)")

"""The GPU host checks (reprokit/environments/host_checks.py): which GPUs --gpus names, and whether they fit
each framework's CUDA build as docker/bases.toml records it (measured from the wheels)."""
from __future__ import annotations

import shutil

import pytest

from reprokit.environments import host_checks as hc
from reprokit.errors import UserError

GPU_OK = [{"index": "0", "uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3", "driver": "580.95.05",
           "compute_capability": "9.0"}]
B200 = dict(GPU_OK[0], name="NVIDIA B200", compute_capability="10.0")


@pytest.mark.parametrize("frameworks, gpus, rows, fragment", [
    ({"pytorch"}, "all", [dict(GPU_OK[0], driver="570.86.15")],
     "The NVIDIA driver 570.86.15 is older than the 580.65.06 that the pytorch image's CUDA 13 build needs"),
    ({"tensorflow"}, "all", [dict(GPU_OK[0], driver="470.256.02")],
     "The NVIDIA driver 470.256.02 is older than the 525.60.13 that the tensorflow image's CUDA 12 build needs"),
    ({"pytorch"}, "all", [dict(GPU_OK[0], name="Tesla V100-SXM2-16GB", compute_capability="7.0")],
     "GPU 0 (Tesla V100-SXM2-16GB, compute capability 7.0) is not among the GPUs the pytorch image's CUDA 13 "
     "build has kernels for (compute capability 7.5, 8.0, 8.6, 9.0, 10.0, 12.0)"),
    ({"tensorflow"}, "all", [dict(GPU_OK[0], name="Tesla M60", compute_capability="5.2")],
     "GPU 0 (Tesla M60, compute capability 5.2) is not among the GPUs the tensorflow image"),
    # Blackwell runs TensorFlow's compute_90 PTX: the driver must know the GPU (CUDA 12.8's 570.26)
    ({"tensorflow"}, "all", [dict(B200, driver="560.35.03")],
     "The NVIDIA driver 560.35.03 is older than the 570.26 that the tensorflow image's CUDA 12 build needs on "
     "GPU 0 (NVIDIA B200, compute capability 10.0), where it compiles the build's PTX"),
    ({"pytorch"}, ["3"], GPU_OK, "GPU id 3 is not on this host (it has 0)"),
    ({"pytorch"}, "all", [], "nvidia-smi lists none"),
])
def test_gpu_host_check_says_what_does_not_fit(frameworks, gpus, rows, fragment):
    with pytest.raises(UserError) as err:
        hc.check_gpu_host(frameworks, gpus, host_gpus=rows)
    assert fragment in str(err.value)
    assert "--gpus" in str(err.value) or "nvidia-smi -L" in str(err.value)


def test_gpu_host_check_passes_a_fitting_host():
    hc.check_gpu_host({"pytorch", "tensorflow"}, "all", host_gpus=GPU_OK)
    hc.check_gpu_host({"pytorch", "tensorflow"}, ["GPU-aaaa"], host_gpus=GPU_OK)
    hc.check_gpu_host({"tensorflow"}, "all", host_gpus=[dict(GPU_OK[0], compute_capability="7.0")])   # V100
    hc.check_gpu_host({"tensorflow"}, "all", host_gpus=[dict(GPU_OK[0], compute_capability="7.5",
                                                             driver="525.60.13")])   # T4 on sm_70 SASS
    hc.check_gpu_host({"tensorflow"}, "all", host_gpus=[dict(B200, driver="570.26")])
    hc.check_gpu_host({"pytorch", "tensorflow"}, "all", host_gpus=[B200])
    hc.check_gpu_host({"pytorch"}, "none", host_gpus=[])


@pytest.mark.parametrize("framework, cc, kernels, driver", [
    ("tensorflow", "6.0", "sass", "525.60.13"), ("tensorflow", "6.1", "sass", "525.60.13"),
    ("tensorflow", "7.5", "sass", "525.60.13"), ("tensorflow", "8.6", "sass", "525.60.13"),
    ("tensorflow", "8.9", "sass", "525.60.13"), ("tensorflow", "9.0", "sass", "525.60.13"),
    ("tensorflow", "10.0", "ptx", "570.26"), ("tensorflow", "12.0", "ptx", "570.26"),
    ("tensorflow", "10.3", "ptx", "555.42.06"), ("tensorflow", "5.2", None, "525.60.13"),
    ("pytorch", "7.5", "sass", "580.65.06"), ("pytorch", "8.9", "sass", "580.65.06"),
    ("pytorch", "12.1", "sass", "580.65.06"), ("pytorch", "7.0", None, "580.65.06"),
    ("pytorch", "11.0", None, "580.65.06"),
])
def test_kernels_and_driver_per_generation(framework, cc, kernels, driver):
    need = hc.base_images.load_bases()[framework]
    assert hc.kernels_for(need, cc) == kernels
    assert hc.min_driver_for(need, cc) == driver


def test_a_jit_cache_only_where_a_gpu_compiles_ptx(tmp_path):
    assert hc.jit_cache("tensorflow", GPU_OK, tmp_path) is None
    assert hc.jit_cache("pytorch", [B200], tmp_path) is None
    cache = hc.jit_cache("tensorflow", [B200], tmp_path)
    assert cache.host == tmp_path / "cuda-jit" / "tensorflow" and cache.host.is_dir()
    assert cache.environment == {"CUDA_CACHE_PATH": cache.target, "CUDA_CACHE_MAXSIZE": str(4 * 2**30)}


def test_gpu_host_without_nvidia_smi_is_one_clear_message(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="no nvidia-smi.*install the NVIDIA driver, or run with --gpus none"):
        hc.check_gpu_host({"pytorch"}, "all")


def test_parse_gpus():
    assert hc.parse_gpus("none") == "none" and hc.parse_gpus("ALL") == "all"
    assert hc.parse_gpus("0, 1") == ["0", "1"] and hc.parse_gpus(["2"]) == ["2"]
    assert hc.parse_gpus("MIG-a45882f0-9215-5733-a0c1-49286ab31cb5") == ["MIG-a45882f0-9215-5733-a0c1-49286ab31cb5"]
    with pytest.raises(UserError, match="--gpus 'two' is not understood"):
        hc.parse_gpus("two")


# --- against recorded drivers (tests/fixtures/nvidia_smi) ----------------------------------------

def test_an_old_driver_without_compute_cap_is_judged_by_its_version(nvidia_smi_replay):
    nvidia_smi_replay("465.27-rtx2080super")
    (gpu,) = hc.query_gpus()
    assert gpu["compute_capability"] is None and gpu["driver"] == "465.27"
    with pytest.raises(UserError, match="driver 465.27 is older than the 525.60.13"):
        hc.check_gpu_host({"tensorflow"}, "all")


def test_a_recorded_h100_fits_both_images(nvidia_smi_replay):
    nvidia_smi_replay("590.48.01-h100")
    hc.check_gpu_host({"pytorch", "tensorflow"}, ["0"])
    hc.check_gpu_host({"pytorch", "tensorflow"}, ["GPU-00000000-0000-0000-0000-000000000000"])


def test_mig_uuids_are_accepted_and_resolved_to_their_gpu(nvidia_smi_replay):
    nvidia_smi_replay("590.48.01-h200-mig")
    (mig,) = hc.resolve_gpus("MIG-00000003-0000-0000-0000-000000000003")
    assert mig["uuid"] == "MIG-00000003-0000-0000-0000-000000000003"
    assert mig["gpu_uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    assert mig["name"] == "NVIDIA H200 MIG 1g.18gb" and mig["compute_capability"] == "9.0"
    hc.check_gpu_host({"pytorch", "tensorflow"}, "MIG-00000003-0000-0000-0000-000000000003")
    (whole,) = hc.resolve_gpus("0")
    assert whole["uuid"] == whole["gpu_uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    with pytest.raises(UserError, match="GPU id MIG-00000009-0000-0000-0000-000000000009 is not on this host"):
        hc.resolve_gpus("MIG-00000009-0000-0000-0000-000000000009")


def test_bf16_is_refused_below_compute_capability_8_in_one_sentence():
    v100 = dict(GPU_OK[0], name="Tesla V100-SXM2-16GB", compute_capability="7.0")
    with pytest.raises(UserError, match=r"^precision bf16_mixed needs compute capability 8\.0 or newer, and GPU 0 "
                                        r"\(Tesla V100-SXM2-16GB, compute capability 7\.0\) is older; set "):
        hc.check_precision({"fp32", "bf16_mixed"}, "all", host_gpus=[v100])
    hc.check_precision({"fp32"}, "all", host_gpus=[v100])                  # fp32 runs anywhere
    hc.check_precision({"bf16_mixed"}, "all", host_gpus=GPU_OK)            # an H100 (9.0) has bf16
    hc.check_precision({"bf16_mixed"}, "none", host_gpus=[v100])           # no GPU asked for
    # fp16 with loss scaling needs Volta's tensor cores: tuned's mixed precision where a GPU has no bf16
    hc.check_precision({"fp16_mixed"}, "all", host_gpus=[v100])
    p100 = dict(GPU_OK[0], name="Tesla P100-PCIE-16GB", compute_capability="6.0")
    with pytest.raises(UserError, match=r"^precision fp16_mixed needs compute capability 7\.0 or newer, and GPU 0 "
                                        r"\(Tesla P100-PCIE-16GB, compute capability 6\.0\) is older"):
        hc.check_precision({"fp16_mixed"}, "all", host_gpus=[p100])
    assert hc.mixed_precision("all", host_gpus=GPU_OK) == "bf16_mixed"
    assert hc.mixed_precision("all", host_gpus=[*GPU_OK, dict(v100, index=1)]) == "fp16_mixed"   # every GPU's

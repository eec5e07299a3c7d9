"""Model FLOPs utilisation: the device's peak from the datasheet table, or the CPU's measured matmul rate.

GPU names are matched whole, as drivers print them (nvidia-smi, torch.cuda.get_device_name).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from reprokit.results import utilisation

REFERENCE = sorted((Path(__file__).resolve().parent.parent / "reports" / "quick-cpu" / "results").glob("*.json"))


@pytest.fixture
def result():
    return json.loads(REFERENCE[0].read_text())


def _on(result, name, tf32=False, dtype="float32"):
    r = copy.deepcopy(result)
    r["environment"].update(device="gpu", device_name=name, tf32=tf32, precision={"compute_dtype": dtype})
    return r


def test_cpu_peak_is_the_measured_matmul_rate(result):
    top, source = utilisation.peak(result)
    assert top == result["environment"]["matmul_peak_flops"] > 1e9 and "measured" in source
    flops = 1e8
    assert utilisation.mfu(result, flops) == pytest.approx(flops * result["timing"]["samples_per_s"] / top)
    assert utilisation.mfu(result, None) is None
    cached = copy.deepcopy(result)
    cached["environment"]["matmul_peak_source"] = "cached: measured by run abc"
    assert utilisation.peak(cached)[1].endswith("(cached: measured by run abc)")


# (device name as printed, table row, dense bf16 peak or None where the GPU has no bf16)
NAMES = [
    ("NVIDIA H100 80GB HBM3", "h100-sxm", 989.5e12), ("NVIDIA H100 PCIe", "h100-pcie", 756.5e12),
    ("NVIDIA H100 NVL", "h100-nvl", 835.5e12), ("NVIDIA H200", "h200-sxm", 989.5e12),
    ("NVIDIA H200 NVL", "h200-nvl", 835.5e12), ("NVIDIA A100-SXM4-80GB", "a100", 312e12),
    ("NVIDIA A100-SXM4-40GB", "a100", 312e12), ("NVIDIA A100-PCIE-40GB", "a100", 312e12),
    ("A100-SXM4-40GB", "a100", 312e12), ("NVIDIA A100 80GB PCIe", "a100", 312e12),
    ("NVIDIA L4", "l4", 121e12), ("NVIDIA L40", "l40", 181.05e12), ("NVIDIA L40S", "l40s", 362.05e12),
    ("NVIDIA A10", "a10", 125e12), ("Tesla V100-SXM2-16GB", "v100-sxm2", None),
    ("Tesla V100-PCIE-16GB", "v100-pcie", None), ("Tesla T4", "t4", None),
]


@pytest.mark.parametrize("name, key, bf16", NAMES)
def test_whole_names_find_their_own_row(result, name, key, bf16):
    assert utilisation.model(name) is utilisation.table()[key]
    top, source = utilisation.peak(_on(result, name, dtype="bfloat16"))
    assert top == bf16
    assert ("datasheet" in source or "product brief" in source) if bf16 else source == f"no bf16 peak known for {name}"


# vGPU guests see their profile's name, a slice of a GPU: "GRID A100D-20C" (time-sliced) and "GRID A100D-1-20C"
# (MIG-backed), as torch and nvidia-smi print them on such hosts (seen in public training logs); no full-GPU peak.
@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA H100",
                                  "NVIDIA L4 Ti", "NVIDIA GeForce RTX 4090", "NVIDIA B200", "GRID T4-16Q",
                                  "GRID A100D-20C", "GRID A100D-1-20C"])
def test_an_unknown_gpu_gets_no_peak(result, name):
    assert utilisation.peak(_on(result, name)) == (None, f"no peak known for {name}")
    assert utilisation.mfu(_on(result, name), 1e9) is None


def test_l4_is_not_l40s_and_sxm_is_not_pcie(result):
    l4, l40s = (utilisation.peak(_on(result, n, tf32=True))[0] for n in ("NVIDIA L4", "NVIDIA L40S"))
    assert (l4, l40s) == (60e12, 183e12)
    sxm, pcie, nvl = (utilisation.peak(_on(result, n))[0] for n in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe",
                                                                   "NVIDIA H100 NVL"))
    assert (sxm, pcie, nvl) == (67e12, 51e12, 60e12)


@pytest.mark.parametrize("name, tf32, dtype, expected, says", [
    ("NVIDIA H200", False, "float32", 67e12, "fp32"),
    ("NVIDIA H200", True, "float32", 494.5e12, "tf32"),
    ("NVIDIA A100-SXM4-80GB", True, "bfloat16", 312e12, "bf16"),       # bf16 applied: its peak, TF32 or not
    ("NVIDIA A100-SXM4-80GB", False, "float16", 312e12, "fp16"),
    ("Tesla T4", False, "float16", 65e12, "fp16"),
    # TF32 asked for on a GPU without it (compute capability below 8.0): fp32, and said so
    ("Tesla V100-SXM2-16GB", True, "float32", 15.7e12, "has no TF32, so it computed in fp32"),
    ("Tesla T4", True, "float32", 8.1e12, "(compute capability 7.5) has no TF32"),
])
def test_the_peak_of_the_precision_the_run_applied(result, name, tf32, dtype, expected, says):
    r = _on(result, name, tf32, dtype)
    top, source = utilisation.peak(r)
    assert top == expected and says in source
    assert utilisation.mfu(r, 1e9) == pytest.approx(1e9 * r["timing"]["samples_per_s"] / expected)


def test_every_row_cites_a_source_and_has_an_fp32_peak():
    for key, row in utilisation.table().items():
        assert row["source"].startswith("NVIDIA ") and row["fp32"] > 1e12 and row["names"], key
        assert all(row[p] >= row["fp32"] for p in ("tf32", "bf16", "fp16") if p in row), key


# fp64 is the CUDA-core rate (the certificate's fp64 convolutions run there), from the datasheet
# where it gives one, else fp32 times the architecture's documented ratio.
DERIVED_FP64 = {"t4": 32, "a10": 64, "l4": 64, "l40": 64, "l40s": 64}


def test_every_gpu_row_has_an_fp64_peak_and_its_source():
    for key, row in utilisation.table().items():
        assert "FP64" in row["source"] and 0 < row["fp64"] < row["fp32"], key
        if key in DERIVED_FP64:
            assert row["fp64"] == row["fp32"] / DERIVED_FP64[key], key
            assert f"FP64 not on the datasheet: 1/{DERIVED_FP64[key]} of FP32" in row["source"], key
    assert utilisation.table()["h100-sxm"]["fp64"] == 34e12          # not the FP64 Tensor Core 67


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA H100 80GB HBM3", 34e12), ("NVIDIA A100-SXM4-80GB", 9.7e12), ("Tesla V100-PCIE-16GB", 7e12),
    ("Tesla T4", 8.1e12 / 32), ("NVIDIA L4", 30.3e12 / 64),        # T4: below compute capability 8.0, as TF32 is not
])
def test_the_fp64_peak_is_a_precision_like_the_others(name, expected):
    top, source = utilisation.device_peak(name, "fp64")
    assert top == expected and source.endswith(", fp64") and "FP64" in source


def test_an_unknown_gpu_has_no_fp64_peak_and_the_t4_is_the_slowest():
    assert utilisation.device_peak("NVIDIA B200", "fp64") == (None, "no peak known for NVIDIA B200")
    assert utilisation.slowest("fp64") is utilisation.table()["t4"]


def test_tf32_on_for_convolutions_only_blends_the_two_peaks_by_the_flops_of_each(result):
    """PyTorch's default: cuDNN's convolutions in TF32, matmuls in fp32 (as_posted reads it back apart)."""
    r = _on(result, "NVIDIA H100 80GB HBM3", tf32=True)
    r["environment"]["tf32_ops"] = {"matmul": False, "convolution": True}
    r["model"]["flops_counted"]["training_by_op"] = {"convolution": 99e9, "matmul": 1e9}
    top, source = utilisation.peak(r)
    assert top == pytest.approx(100e9 / (99e9 / 494.5e12 + 1e9 / 67e12))
    assert "TF32 on for convolutions only (99.0% of the training FLOPs), fp32 for the rest" in source
    # both on, or a result from before the kits read them apart: the TF32 peak as before
    r["environment"]["tf32_ops"] = {"matmul": True, "convolution": True}
    assert utilisation.peak(r)[0] == 494.5e12
    del r["model"]["flops_counted"]["training_by_op"]
    r["environment"]["tf32_ops"] = {"matmul": False, "convolution": True}
    top, source = utilisation.peak(r)
    assert top == 494.5e12 and "counted no FLOPs by op, so the TF32 peak" in source


def test_the_cpu_peak_is_the_best_of_short_windows():
    """A moment of load elsewhere slows one window of the matmul, not the peak a run's MFU is held against."""
    import time

    from reprokit.kits.framework_free import cpu_peak
    calls = []

    def step():
        calls.append(time.perf_counter())
        time.sleep(0.04 if len(calls) <= 4 else 0.005)      # the first window's steps run eight times slower
        return len(calls)
    rate = cpu_peak.best_rate(step, lambda out: out, 1e6)
    assert 2 * 1e6 / 0.04 < rate <= 1e6 / 0.005          # a fast window's rate, not the slow one's
    assert cpu_peak.key({"framework": "pytorch", "framework_version": "2", "cpu_threads": {"intra_op": 2,
                                                                                           "inter_op": 1}}) \
        == cpu_peak.key({"framework": "pytorch", "framework_version": "2", "cpu_threads": {"intra_op": 2,
                                                                                           "inter_op": 2}})

"""Model FLOPs utilisation: the device's peak from the datasheet table, or the CPU's measured matmul rate."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from reprokit import utilisation

REFERENCE = sorted((Path(__file__).resolve().parent.parent / "reports" / "quick-cpu" / "results").glob("*.json"))


@pytest.fixture
def result():
    return json.loads(REFERENCE[0].read_text())


def test_cpu_peak_is_the_measured_matmul_rate(result):
    top, source = utilisation.peak(result)
    assert top == result["environment"]["matmul_peak_flops"] > 1e9 and "measured" in source
    flops = 1e8
    assert utilisation.mfu(result, flops) == pytest.approx(flops * result["timing"]["samples_per_s"] / top)
    assert utilisation.mfu(result, None) is None


@pytest.mark.parametrize("name,tf32,dtype,expected", [
    ("NVIDIA H200", False, "float32", 67e12),
    ("NVIDIA H200", True, "float32", 494.5e12),
    ("NVIDIA A100-SXM4-80GB", False, "bfloat16", 312e12),
    ("Tesla V100-SXM2-16GB", False, "bfloat16", None),
])
def test_gpu_peak_by_model_and_precision(result, name, tf32, dtype, expected):
    r = copy.deepcopy(result)
    r["environment"].update(device="gpu", device_name=name, tf32=tf32, precision={"compute_dtype": dtype})
    top, source = utilisation.peak(r)
    assert top == expected
    assert ("datasheet" in source) if expected else ("no bf16 peak" in source)

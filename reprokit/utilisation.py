"""Model FLOPs utilisation: training FLOPs per sample x samples/s / the device's peak.

The peak is the one of the precision the run applied (what the framework reported: its compute
dtype and whether TF32 was on), for the GPU model matched by its whole name.
"""
from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path

PREFIXES = ("nvidia ", "tesla ")


@lru_cache(maxsize=1)
def _table() -> dict:
    return tomllib.loads((Path(__file__).with_name("peak_flops.toml")).read_text())


def model_key(device_name: str) -> str:
    """A device name without the vendor prefix some drivers print, case and spacing folded."""
    name = " ".join(device_name.split()).lower()
    for prefix in PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def model(device_name: str) -> dict | None:
    """The peak table's row for this exact GPU model, or None."""
    key = model_key(device_name)
    return next((row for row in _table().values() if key in (n.lower() for n in row["names"])), None)


def applied_precision(env: dict) -> str:
    """fp32, tf32, bf16 or fp16: what the framework reported it computed in."""
    dtype = (env.get("precision") or {}).get("compute_dtype")
    if dtype == "bfloat16":
        return "bf16"
    if dtype == "float16":
        return "fp16"
    return "tf32" if env.get("tf32") else "fp32"


def peak(result: dict) -> tuple[float | None, str]:
    """The peak FLOP/s this run could reach, and where the figure comes from."""
    env = result["environment"]
    if env["device"] == "cpu":
        measured = env.get("matmul_peak_flops")
        how = env.get("matmul_peak_source")          # measured by this run, or cached from an earlier one
        return measured, "measured fp32 matmul rate of this CPU with the run's threads" + (f" ({how})" if how else "")
    return device_peak(env["device_name"], applied_precision(env))


def device_peak(name: str, precision: str) -> tuple[float | None, str]:
    """A GPU model's datasheet peak for a precision (fp32, tf32, bf16, fp16), and its source."""
    row = model(name)
    if row is None:
        return None, f"no peak known for {name}"
    cc = row["compute_capability"]
    if precision == "tf32" and tuple(map(int, re.findall(r"\d+", cc))) < (8, 0):
        return row["fp32"], (f"{row['source']}, fp32: TF32 was on, but {name} (compute capability {cc}) has "
                             f"no TF32, so it computed in fp32")
    if precision not in row:
        return None, f"no {precision} peak known for {name}"
    return row[precision], f"{row['source']}, {precision}"


def mfu(result: dict, flops_per_sample: float | None) -> float | None:
    top, _ = peak(result)
    if not top or not flops_per_sample:
        return None
    return flops_per_sample * result["timing"]["samples_per_s"] / top

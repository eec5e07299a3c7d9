"""Model FLOPs utilisation: training FLOPs per sample x samples/s / the device's peak."""
from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def _table() -> dict:
    return tomllib.loads((Path(__file__).with_name("peak_flops.toml")).read_text())


def peak(result: dict) -> tuple[float | None, str]:
    """The peak FLOP/s this run could reach, and where the figure comes from."""
    env = result["environment"]
    if env["device"] == "cpu":
        measured = env.get("matmul_peak_flops")
        return measured, "measured fp32 matmul rate of this CPU with the run's threads"
    precision = "bf16" if (env.get("precision") or {}).get("compute_dtype") == "bfloat16" else (
        "tf32" if env.get("tf32") else "fp32")
    for key in sorted(_table(), key=len, reverse=True):
        if key.lower() in env["device_name"].lower():
            row = _table()[key]
            if precision in row:
                return row[precision], f"{row['source']}, {precision}"
            return None, f"no {precision} peak known for {key}"
    return None, f"no peak known for {env['device_name']}"


def mfu(result: dict, flops_per_sample: float | None) -> float | None:
    top, _ = peak(result)
    if not top or not flops_per_sample:
        return None
    return flops_per_sample * result["timing"]["samples_per_s"] / top

"""Model FLOPs utilisation: training FLOPs per sample x samples/s / the device's peak.

The peak is the one of the precision the run applied (what the framework reported: its compute
dtype and whether TF32 was on), for the GPU model matched by its whole name. Where TF32 was on for one
kind of op only (PyTorch's default: convolutions, not matmuls), it is the two peaks weighted by the
training FLOPs of each kind: the rate the run could reach if each op ran at its own peak.
"""
from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

PREFIXES = ("nvidia ", "tesla ")


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    return tomllib.loads((Path(__file__).with_name("peak_flops.toml")).read_text())


def model_key(device_name: str) -> str:
    """A device name without the vendor prefix some drivers print, case and spacing folded."""
    name = " ".join(device_name.split()).lower()
    for prefix in PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def model(device_name: str) -> dict[str, Any] | None:
    """The peak table's row for this exact GPU model, or None."""
    key = model_key(device_name)
    return next((row for row in table().values() if key in (n.lower() for n in row["names"])), None)


def applied_precision(env: dict[str, Any]) -> str:
    """fp32, tf32, bf16 or fp16: what the framework reported it computed in."""
    dtype = (env.get("precision") or {}).get("compute_dtype")
    if dtype == "bfloat16":
        return "bf16"
    if dtype == "float16":
        return "fp16"
    return "tf32" if env.get("tf32") else "fp32"


def peak(result: dict[str, Any]) -> tuple[float | None, str]:
    """The peak FLOP/s this run could reach, and where the figure comes from."""
    env = result["environment"]
    if env["device"] == "cpu":
        measured = env.get("matmul_peak_flops")
        how = env.get("matmul_peak_source")          # measured by this run, or cached from an earlier one
        return measured, "measured fp32 matmul rate of this CPU with the run's threads" + (f" ({how})" if how else "")
    ops = env.get("tf32_ops") or {}
    if applied_precision(env) == "tf32" and len(set(ops.values())) == 2:
        return _blended(env["device_name"], ops, (result.get("model", {}).get("flops_counted") or {})
                        .get("training_by_op"))
    return device_peak(env["device_name"], applied_precision(env))


def _blended(name: str, tf32_ops: dict[str, Any], by_op: dict[str, Any] | None) -> tuple[float | None, str]:
    """The peak of a run whose convolutions and matmuls ran in different precisions (TF32 on for one only)."""
    on = next(op for op, enabled in tf32_ops.items() if enabled)
    if not by_op or not sum(by_op.values()):
        top, source = device_peak(name, "tf32")
        return top, f"{source}: TF32 on for {on}s only, and the run counted no FLOPs by op, so the TF32 peak"
    peaks = {op: device_peak(name, "tf32" if tf32_ops.get(op) else "fp32") for op in by_op}
    if not all(top for top, _ in peaks.values()):
        return None, next(source for top, source in peaks.values() if not top)
    total = sum(by_op.values())
    top = total / sum(flops / peaks[op][0] for op, flops in by_op.items() if flops)
    return top, (f"{peaks[on][1]}: TF32 on for {on}s only ({by_op[on] / total:.1%} of the training FLOPs), "
                 f"fp32 for the rest, each at its own peak")


def device_peak(name: str, precision: str) -> tuple[float | None, str]:
    """A GPU model's datasheet peak for a precision (fp32, tf32, bf16, fp16, fp64), and its source."""
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


def slowest(precision: str) -> dict[str, Any]:
    """The table's row with the lowest peak of this precision, of the rows that have one."""
    return min((row for row in table().values() if precision in row), key=lambda row: row[precision])


def mfu(result: dict[str, Any], flops_per_sample: float | None) -> float | None:
    top, _ = peak(result)
    if not top or not flops_per_sample:
        return None
    fraction: float = flops_per_sample * result["timing"]["samples_per_s"] / top
    return fraction

"""Units: each with its dimension and its factor to the dimension's base unit, and how a value is written.

The base units are those of the result files: seconds, bytes, samples, fractions. Memory is
always written in MiB or GiB, whatever unit a post used; a post's own words are quoted as posted.
"""
from __future__ import annotations

import math

# unit -> (dimension, factor to the dimension's base unit)
UNITS: dict[str, tuple[str, float]] = {
    "s": ("time", 1.0), "ms": ("time", 1e-3), "min": ("time", 60.0), "h": ("time", 3600.0),
    "it/s": ("step_rate", 1.0), "samples/s": ("sample_rate", 1.0),
    "B": ("bytes", 1.0), "KB": ("bytes", 1e3), "MB": ("bytes", 1e6), "GB": ("bytes", 1e9),
    "KiB": ("bytes", 2.0**10), "MiB": ("bytes", 2.0**20), "GiB": ("bytes", 2.0**30),
    "B/step": ("bytes_per_step", 1.0), "KiB/step": ("bytes_per_step", 2.0**10),
    "MiB/step": ("bytes_per_step", 2.0**20),
    "samples/step": ("batch", 1.0), "samples": ("samples", 1.0),
    "x": ("ratio", 1.0), "fraction": ("fraction", 1.0), "%": ("fraction", 0.01),
    "J/sample": ("energy_per_sample", 1.0),
    "correct/batch": ("per_batch", 1.0),     # a sum of correct predictions divided by the number of batches
    "qualitative": ("qualitative", 1.0),     # words only; the figure carries `text`
}
# Dimensions whose values cannot be negative (a claim that states one below zero is refused), as said in words.
NON_NEGATIVE = {"time": "a time", "step_rate": "a step rate", "sample_rate": "a throughput", "bytes": "memory",
                "batch": "a batch size", "samples": "a count of samples", "ratio": "a ratio of them",
                "per_batch": "a count per batch", "energy_per_sample": "an energy per sample"}


def sig(x: float) -> str:
    """Three significant figures, thousands separated."""
    if not math.isfinite(x):
        return "∞" if x > 0 else "-∞" if x < 0 else "n/a"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def memory(b: float) -> str:
    """Bytes in MiB below 1 GiB, in GiB from there."""
    return f"{b / 2**30:.2f} GiB" if abs(b) >= 2**30 else f"{b / 2**20:,.0f} MiB"


def fmt(value: float, dimension: str, unit: str | None = None) -> str:
    """A base-unit value for people: in ``unit`` when given (memory excepted), else by magnitude."""
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if dimension == "bytes":
        return memory(value)
    if dimension == "bytes_per_step":
        return f"{value / 2**10:+,.1f} KiB/step"
    if unit and unit not in ("qualitative", "x", "fraction"):
        return f"{sig(value / UNITS[unit][1])} {unit}"
    if dimension == "time":
        if abs(value) < 1:
            return f"{value * 1e3:.1f} ms"
        if abs(value) < 120:
            return f"{value:.1f} s"
        return f"{int(value // 60)}m {value % 60:02.0f}s"
    if dimension == "ratio":
        return f"{value:.2f}x"
    if dimension == "fraction":
        return f"{value:.3f}"
    if dimension == "batch":
        return f"{value:g} samples/step"
    if dimension == "samples":
        return f"{value:,.0f} samples"
    if dimension == "sample_rate":
        return f"{value:,.1f} samples/s"
    if dimension == "step_rate":
        return f"{value:.2f} it/s"
    return sig(value)

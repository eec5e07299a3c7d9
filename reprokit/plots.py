"""The report's PNG plots, drawn from result files only (matplotlib's Agg canvas, no display).

Per experiment: samples/s per variant and framework, and sampled memory over training steps
per variant (one panel per framework). Each plot is a pure function of the results passed in.
"""
from __future__ import annotations

import re
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402  (after the backend is chosen)

FRAMEWORKS = ("pytorch", "tensorflow")
LABEL = {"pytorch": "PyTorch", "tensorflow": "TensorFlow"}
COLOR = {"pytorch": "#d9534f", "tensorflow": "#f0ad4e"}


def variant_order(variants: set[str] | list[str]) -> list[str]:
    """fixed first, then each "+pitfall" (alphabetically), then named variants such as as_posted."""
    vs = set(variants)
    return (["fixed"] if "fixed" in vs else []) + sorted(v for v in vs if v.startswith("+")) + \
        sorted(v for v in vs if v != "fixed" and not v.startswith("+"))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "-", text.lower()).strip("-")


def _ok(results: list[dict], experiment: str) -> list[dict]:
    return [r for r in results if r["status"] == "ok" and r["experiment"] == experiment]


def throughput(path: Path, experiment: str, results: list[dict]) -> Path | None:
    """Grouped bars: samples/s (median over repeats) per variant, one bar per framework that ran it."""
    runs = _ok(results, experiment)
    if not runs:
        return None
    by = defaultdict(list)
    for r in runs:
        by[(r["variant"], r["framework"])].append(r["timing"]["samples_per_s"])
    variants = variant_order({v for v, _ in by})
    fig = Figure(figsize=(max(6.0, 0.9 * len(variants) + 2), 4.2), layout="constrained")
    ax = fig.add_subplot()
    width = 0.4
    for i, fw in enumerate(FRAMEWORKS):
        xs = [j + (i - 0.5) * width for j, v in enumerate(variants) if (v, fw) in by]
        ys = [statistics.median(by[(v, fw)]) for v in variants if (v, fw) in by]
        if xs:
            bars = ax.bar(xs, ys, width, label=LABEL[fw], color=COLOR[fw])
            ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(variants)), variants, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("training samples/s (after warmup)")
    profile = runs[0]["profile"]
    ax.set_title(f"{experiment}: throughput per variant ({profile} profile)", fontsize=10)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    return path


def memory(path: Path, experiment: str, results: list[dict]) -> Path | None:
    """Sampled memory over training steps, a line per variant (first repeat), a panel per framework."""
    runs = [r for r in _ok(results, experiment) if r["memory"].get("over_steps")]
    if not runs:
        return None
    frameworks = [fw for fw in FRAMEWORKS if any(r["framework"] == fw for r in runs)]
    fig = Figure(figsize=(6.0 * len(frameworks), 4.2), layout="constrained")
    axes = fig.subplots(1, len(frameworks), squeeze=False)[0]
    for ax, fw in zip(axes, frameworks):
        mine = sorted((r for r in runs if r["framework"] == fw), key=lambda r: r["repeat"])
        first: dict[str, dict] = {}
        for r in mine:
            first.setdefault(r["variant"], r)
        top = 0.0
        for variant in variant_order(set(first)):
            pts = sorted(first[variant]["memory"]["over_steps"])
            top = max([top, *(p[1] / 2**20 for p in pts)])
            ax.plot([p[0] for p in pts], [p[1] / 2**20 for p in pts], label=variant,
                    linewidth=2.2 if variant in ("fixed", "as_posted") else 1.0,
                    linestyle="-" if not variant.startswith("+") else "--")
        ax.set_title(f"{LABEL[fw]} ({mine[0]['spec'].get('device', '?')}; peak source: "
                     f"{mine[0]['memory']['source']})", fontsize=8)
        ax.set_xlabel("training step")
        ax.set_ylabel("current memory sampled during training (MiB)")
        ax.set_ylim(0, top * 1.15 or 1)       # from zero, so noise does not look like growth
        ax.legend(fontsize=7)
    fig.suptitle(f"{experiment}: memory over training steps ({runs[0]['profile']} profile)", fontsize=10)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    return path


def write_all(report_dir: Path, results: list[dict]) -> dict[str, list[tuple[str, str]]]:
    """Write every plot beside the report; experiment -> [(caption, file name relative to report_dir)]."""
    out: dict[str, list[tuple[str, str]]] = {}
    for experiment in sorted({r["experiment"] for r in results if r["status"] == "ok"}):
        made = []
        for caption, draw, suffix in (("samples/s per variant and framework", throughput, "throughput"),
                                      ("memory over training steps per variant", memory, "memory")):
            name = f"{_slug(experiment)}-{suffix}.png"
            if draw(report_dir / name, experiment, results):
                made.append((caption, name))
        out[experiment] = made
    return out

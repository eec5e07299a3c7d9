"""The report's PNG plots, drawn from result files only (matplotlib's Agg canvas, no display).

Per experiment, two figures a reader can compare at a glance:

- throughput: samples/s per variant, both frameworks on one axis, error bars from the repeats;
- memory: peak memory per variant split by phase (training, evaluation, where the results have
  per-phase peaks, and the run's overall peak), then memory sampled over training steps; every
  memory panel shares one y axis, so the frameworks (PyTorch, TensorFlow, ...) sit on the same scale.

Colours are the Okabe-Ito palette, which colour-blind readers can tell apart. Each figure's title
says what ran. Every figure is a pure function of the results passed in. On a host without
matplotlib no figure is drawn and ``unavailable()`` says so in one sentence for the report.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kits.common.files import atomic_file
from kits.common.names import FRAMEWORKS, LABELS, REGISTRY, compared
from reprokit.results import metrics, stats
from reprokit.results.metrics import NotMeasured
from reprokit.results.runs import Grouped, variant_order

if TYPE_CHECKING:       # for the annotations only: matplotlib is imported where a plot is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Okabe & Ito (2008), "Color Universal Design": distinguishable with any common colour-vision deficiency.
PHASE_COLOR = {"train": "#009E73", "eval": "#CC79A7", "peak": "#999999"}
CYCLE = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00",
         "#CC79A7")   # its yellow is too pale for a line
STYLES = ("-", "--", ":")
PHASES = (("train", "train_peak_memory_bytes", "training phase peak"),
          ("eval", "eval_peak_memory_bytes", "evaluation phase peak"),
          ("peak", "peak_memory_bytes", "run's peak (reported)"))
MIB = 2.0**20
DPI = 100
# One type size throughout: matplotlib renders and caches glyphs per size, and a figure reads as one.
STYLE = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 8, "ytick.labelsize": 8,
         "legend.fontsize": 8, "figure.titlesize": 8}
NOT_DRAWN = "Plots not drawn: matplotlib is not installed on this host (pip install matplotlib)."


def _matplotlib() -> ModuleType | None:
    """The one import of matplotlib, on its Agg canvas (no display); None where this host cannot import it."""
    mpl = stats.optional("matplotlib")
    if mpl is not None:
        mpl.use("Agg")
    return mpl


def unavailable() -> str | None:
    """Why no plot is drawn here, in one sentence; None where matplotlib is installed."""
    return None if _matplotlib() else NOT_DRAWN


def _figure(figsize: tuple[float, float]) -> Figure:
    from matplotlib.figure import Figure  # reached only from write_all, once _matplotlib() found it
    return Figure(figsize=figsize)


def _save(fig: Figure, path: Path) -> None:
    # Through the one atomic writer: a report folder never holds half a PNG.
    with atomic_file(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=DPI, metadata={"Software": None})


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "-", text.lower()).strip("-")


def _bar(values: tuple[float, ...]) -> tuple[float, float, float]:
    """(median, distance down, distance up): the bracket the report prints for these repeats."""
    e = stats.estimate(values)
    return e.median, e.median - e.low, e.high - e.median


def _bars(ax: Axes, x: list[float], values: list[tuple[float, ...]], width: float, color: str, label: str,
          scale: float = 1.0) -> None:
    got = [_bar(v) for v in values]
    whiskers = [[g[1] / scale for g in got], [g[2] / scale for g in got]] if any(len(v) > 1 for v in values) else None
    ax.bar(x, [g[0] / scale for g in got], width, color=color, label=label, yerr=whiskers, capsize=2,
           ecolor="#333333")


def throughput(path: Path, by_variant: dict[str, dict[str, list[dict[str, Any]]]], caption: str) -> Path | None:
    """Grouped bars: samples/s per variant, one bar per framework that ran it, error bars from the repeats."""
    variants = variant_order(by_variant)
    fig = _figure((max(6.0, 0.8 * len(variants) + 2.5), 4.0))
    fig.subplots_adjust(left=0.1, right=0.98, top=0.88, bottom=0.3)
    ax = fig.add_subplot()
    # one slot per framework (the reference's and the others' that ran): 0.4 wide each for a pair
    frameworks = compared({fw for fws in by_variant.values() for fw in fws})
    width = 0.8 / len(frameworks)
    drawn = False
    for i, fw in enumerate(frameworks):
        xs, vals = [], []
        for j, v in enumerate(variants):
            got = metrics.collect(by_variant[v].get(fw, []), "samples_per_s").values
            if got:
                xs.append(j + (i - (len(frameworks) - 1) / 2) * width)
                vals.append(got)
        if xs:
            _bars(ax, xs, vals, width, REGISTRY[fw].colour, LABELS[fw])
            drawn = True
    if not drawn:
        return None
    ax.set_xticks(range(len(variants)), variants, rotation=30, ha="right")
    ax.set_xlim(-0.6, max(len(variants), 3) - 0.4)
    ax.set_ylabel("training samples/s after warmup (higher is better)")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title(textwrap.fill(caption, 110), y=1.0)
    _save(fig, path)
    return path


def memory(path: Path, by_variant: dict[str, dict[str, list[dict[str, Any]]]], caption: str) -> Path | None:
    """Top: peak memory per variant by phase. Bottom: memory sampled over training steps (first repeat).
    One column per framework; all panels share the y axis."""
    frameworks = [fw for fw in FRAMEWORKS if any(by_variant[v].get(fw) for v in by_variant)]
    if not frameworks:
        return None
    variants = variant_order(by_variant)
    fig = _figure((5.5 * len(frameworks), 8.0))
    fig.subplots_adjust(left=0.08, right=0.98, top=0.9, bottom=0.07, hspace=0.75, wspace=0.08)
    axes = fig.subplots(2, len(frameworks), squeeze=False, sharey="all")
    top, phases_missing = 0.0, False
    for col, fw in enumerate(frameworks):
        mine = {v: by_variant[v][fw] for v in variants if by_variant[v].get(fw)}
        bars_top, missing = _phase_bars(axes[0][col], mine)
        top = max(top, bars_top, _over_steps(axes[1][col], mine))
        phases_missing |= missing
        axes[0][col].set_title(f"{LABELS[fw]}: peak memory by phase", y=1.0)
        reported = metrics.memory_readings(next(iter(mine.values()))[0]).get("reported")
        source = reported.source if reported else "no peak recorded"
        axes[1][col].set_title(f"{LABELS[fw]}: memory sampled over training steps\n(peak source: {source})", y=1.0)
        if col:                                        # the shared y axis is labelled once, on the left
            for ax in (axes[0][col], axes[1][col]):
                ax.tick_params(labelleft=False)
                ax.set_ylabel("")
    axes[0][0].set_ylim(0, top * 1.15 or 1)          # from zero, so noise does not look like growth
    note = ("; bars without a phase: these results have no per-phase peaks (an older kit)" if phases_missing
            else "")
    fig.suptitle(textwrap.fill(caption + note, 130), y=1.0)
    _save(fig, path)
    return path


def _phase_bars(ax: Axes, runs: dict[str, list[dict[str, Any]]]) -> tuple[float, bool]:
    """Per variant: the training and evaluation phase peaks and the run's peak, each with its whiskers.
    Returns the highest bar (MiB) and whether a phase had no peaks to show."""
    measured = {phase: [metrics.collect(rs, name).values for rs in runs.values()] for phase, name, _ in PHASES}
    shown = [(phase, label) for phase, _, label in PHASES if any(measured[phase])]
    width, top = 0.8 / max(1, len(shown)), 0.0
    for k, (phase, label) in enumerate(shown):
        xs = [j + (k - (len(shown) - 1) / 2) * width for j, got in enumerate(measured[phase]) if got]
        vals = [got for got in measured[phase] if got]
        top = max([top, *(max(v) / MIB for v in vals)])
        _bars(ax, xs, vals, width, PHASE_COLOR[phase], label, MIB)
    ax.set_xticks(range(len(runs)), list(runs), rotation=30, ha="right")
    ax.set_xlim(-0.6, max(len(runs), 3) - 0.4)          # a lone variant keeps a bar's width
    ax.set_ylabel("MiB (lower is better)")
    ax.legend(loc="lower right")
    return top, len(shown) < len(PHASES)


def _over_steps(ax: Axes, runs: dict[str, list[dict[str, Any]]]) -> float:
    """Memory sampled over training steps, the first repeat of each variant; returns the highest point (MiB)."""
    top = 0.0
    for i, (variant, rs) in enumerate(runs.items()):
        try:
            pts = sorted(metrics.field(min(rs, key=lambda r: r["repeat"]), "memory.over_steps"))
        except NotMeasured:
            continue
        ys = [p[1] / MIB for p in pts]
        top = max([top, *ys])
        ax.plot([p[0] for p in pts], ys, label=variant, color=CYCLE[i % len(CYCLE)],
                linewidth=1.0 if variant.startswith("+") else 2.0, linestyle=STYLES[i // len(CYCLE) % 3])
    ax.set_xlabel("training step")
    ax.set_ylabel("MiB")
    if ax.has_data():
        ax.legend(fontsize=7)
    return top


def write_all(report_dir: Path, grouped: Grouped, captions: dict[str, str]) -> dict[str, list[tuple[str, str]]]:
    """Every plot beside the report; experiment -> [(caption, file name relative to report_dir)].
    ``captions``: experiment -> what ran, for each figure's title. Nothing without matplotlib."""
    mpl = _matplotlib()
    out: dict[str, list[tuple[str, str]]] = {}
    if mpl is None:
        return out
    for experiment in sorted(grouped):
        made = []
        for what, draw, suffix in (("samples/s per variant and framework", throughput, "throughput"),
                                   ("peak memory by phase, and memory over training steps", memory, "memory")):
            caption = f"{captions[experiment]}: {what}"
            name = f"{_slug(experiment)}-{suffix}.png"
            with mpl.rc_context(STYLE):
                if draw(report_dir / name, grouped[experiment], caption):
                    made.append((caption, name))
        out[experiment] = made
    return out

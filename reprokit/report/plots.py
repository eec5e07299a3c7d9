"""The report's PNG plots, drawn from result files only (matplotlib's Agg canvas, no display).

Per experiment, two figures a reader can compare at a glance:

- throughput: samples/s per variant as horizontal bars, one bar per framework (the frameworks in panels of at
  most ``MAX_SERIES``), whiskers from the repeats;
- memory: one row per framework: its peak memory per variant split by phase (training, evaluation, where the
  results have per-phase peaks, and the run's overall peak), and memory sampled over training steps. Every
  panel of a column shares its memory axis, so the frameworks sit on the same scale.

What makes a figure readable is checked, not hoped for: ``problems`` renders a figure and names any text that
overlaps other text or leaves the canvas, and any panel with more than ``MAX_SERIES`` series. Beyond that
many variants, memory over steps highlights the few furthest from the main variant and draws the rest in grey.
A figure holds no caption: the report prints it under the image. Labels are horizontal, so no two tick labels
can cross. Colours are the Okabe-Ito palette, which colour-blind readers can tell apart. Every figure is a pure
function of the results passed in. On a host without matplotlib no figure is drawn and ``unavailable()`` says
so in one sentence for the report.
"""
from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import median
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

from reprokit.kits.contract.files import atomic_file
from reprokit.kits.contract.names import LABELS, REGISTRY, compared
from reprokit.report import forked, scaling_section
from reprokit.report.scaling_section import Sweep
from reprokit.results import metrics, stats
from reprokit.results.metrics import NotMeasured
from reprokit.results.runs import Grouped, variant_order

if TYPE_CHECKING:       # for the annotations only: matplotlib is imported where a plot is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.text import Text

# Okabe & Ito (2008), "Color Universal Design": distinguishable with any common colour-vision deficiency.
PHASE_COLOR = {"train": "#009E73", "eval": "#CC79A7", "peak": "#999999"}
CYCLE = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00")   # its yellow is too pale for a line
CONTEXT = "context"       # the gid of a grey line behind the highlighted ones: not a series of its own
CONTEXT_COLOR = "#C8C8C8"
PHASES = (("train", "train_peak_memory_bytes", "training phase peak"),
          ("eval", "eval_peak_memory_bytes", "evaluation phase peak"),
          ("peak", "peak_memory_bytes", "run's peak (reported)"))
MAX_SERIES = 6            # more in one panel cannot be told apart
MIB = 2.0**20
DPI = 100
# One type size throughout: matplotlib renders and caches glyphs per size, and a figure reads as one.
STYLE = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 8, "ytick.labelsize": 8,
         "legend.fontsize": 8, "figure.titlesize": 8}
NOT_DRAWN = "Plots not drawn: matplotlib is not installed on this host (pip install matplotlib)."

ByVariant = dict[str, dict[str, list[dict[str, Any]]]]


def _matplotlib() -> ModuleType | None:
    """The one import of matplotlib, on its Agg canvas (no display); None where this host cannot import it."""
    mpl = stats.optional("matplotlib")
    if mpl is not None:
        mpl.use("Agg")
    return mpl


def unavailable() -> str | None:
    """Why no plot is drawn here, in one sentence; None where matplotlib is installed."""
    return None if _matplotlib() else NOT_DRAWN


def _figure(width: float, height: float) -> Figure:
    # reached only once _matplotlib() found it; the constrained layout keeps labels of neighbouring panels apart
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> None:
    # Laid out once and drawn once: with a layout engine set, savefig draws the figure once more, without output,
    # to lay it out. Through the one atomic writer: a report folder never holds half a PNG.
    layout = fig.get_layout_engine()
    if layout is not None:
        layout.execute(fig)
        fig.set_layout_engine("none")
    with atomic_file(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=DPI, metadata={"Software": None})


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "-", text.lower()).strip("-")


def _bar(values: tuple[float, ...]) -> tuple[float, float, float]:
    """(median, distance down, distance up): the bracket the report prints for these repeats."""
    e = stats.estimate(values)
    return e.median, e.median - e.low, e.high - e.median


def _bars(ax: Axes, y: list[float], values: list[tuple[float, ...]], height: float, color: str, label: str,
          scale: float = 1.0) -> None:
    got = [_bar(v) for v in values]
    whiskers = [[g[1] / scale for g in got], [g[2] / scale for g in got]] if any(len(v) > 1 for v in values) else None
    ax.barh(y, [g[0] / scale for g in got], height, color=color, label=label, xerr=whiskers, capsize=2,
            ecolor="#333333")


def _ran(by_variant: ByVariant) -> tuple[str, ...]:
    """The frameworks with a run of any variant, the reference first where it ran."""
    present = {fw for fws in by_variant.values() for fw, rs in fws.items() if rs}
    return tuple(fw for fw in compared(present) if fw in present)


def _rows(ax: Axes, names: list[str], rows: int) -> None:
    """Variants down the y axis, the first on top, at least ``rows`` slots so a lone bar keeps its height."""
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(max(len(names), rows) - 0.4, -0.6)


def _chunks(items: tuple[str, ...], size: int) -> Iterator[tuple[str, ...]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _measured_throughput(by_variant: ByVariant) -> bool:
    return any(metrics.collect(rs, "samples_per_s").values for fws in by_variant.values() for rs in fws.values())


def throughput(by_variant: ByVariant) -> Figure:
    """Horizontal bars: samples/s per variant, one bar per framework that ran it, whiskers from the repeats."""
    variants = variant_order(by_variant)
    frameworks = _ran(by_variant)
    measured = {(v, fw): metrics.collect(by_variant[v].get(fw, []), "samples_per_s").values
                for v in variants for fw in frameworks}
    panels = list(_chunks(frameworks, MAX_SERIES))
    fig = _figure(7.0, 0.9 + 0.14 * len(variants) * (1 + min(len(frameworks), MAX_SERIES)) * len(panels))
    axes = fig.subplots(len(panels), 1, squeeze=False, sharex="all")[:, 0]
    for ax, fws in zip(axes, panels, strict=True):
        width = 0.8 / len(fws)
        for i, fw in enumerate(fws):
            ys = [j + (i - (len(fws) - 1) / 2) * width for j, v in enumerate(variants) if measured[(v, fw)]]
            vals = [measured[(v, fw)] for v in variants if measured[(v, fw)]]
            if ys:
                _bars(ax, ys, vals, width, REGISTRY[fw].colour, LABELS[fw])
        _rows(ax, variants, 3)
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(fws), frameon=False, borderaxespad=0.2)
    axes[-1].set_xlabel("training samples/s after warmup (higher is better)")
    axes[-1].set_xlim(left=0)
    return fig


def memory(by_variant: ByVariant) -> Figure:
    """One row per framework: its peak memory per variant by phase (left), and memory sampled over training
    steps, the first repeat of each variant (right). Each column shares its memory axis."""
    frameworks = _ran(by_variant)
    variants = variant_order(by_variant)
    mine = [{v: by_variant[v][fw] for v in variants if by_variant[v].get(fw)} for fw in frameworks]
    slots = [max(len(m), 4) for m in mine]
    fig = _figure(11.0, sum(0.6 + 0.32 * s for s in slots) + 0.5)
    axes = fig.subplots(len(frameworks), 2, squeeze=False, gridspec_kw={"height_ratios": slots})
    top, shown_phases = 0.0, set()
    for row, fw in enumerate(frameworks):
        bars, steps = axes[row]
        bars_top, phases = _phase_bars(bars, mine[row], slots[row])
        shown_phases.update(phases)
        top = max(top, bars_top, _over_steps(steps, mine[row]))
        bars.set_title(f"{LABELS[fw]}: peak memory by phase", loc="left")
        steps.set_title(f"{LABELS[fw]}: memory sampled over training steps", loc="left")
    for row in range(len(frameworks)):            # one scale for every framework, from zero
        axes[row][0].set_xlim(0, top * 1.1 or 1)
        axes[row][1].set_ylim(0, top * 1.1 or 1)
    axes[-1][0].set_xlabel("MiB (lower is better)")
    axes[-1][1].set_xlabel("training step")
    from matplotlib.patches import Patch
    fig.legend(handles=[Patch(color=PHASE_COLOR[phase], label=label) for phase, _, label in PHASES
                        if phase in shown_phases], loc="outside upper left", ncol=len(PHASES), frameon=False)
    return fig


def _phase_bars(ax: Axes, runs: dict[str, list[dict[str, Any]]], slots: int) -> tuple[float, set[str]]:
    """Per variant: the training and evaluation phase peaks and the run's peak, each with its whiskers.
    Returns the highest bar (MiB) and the phases drawn."""
    measured = {phase: [metrics.collect(rs, name).values for rs in runs.values()] for phase, name, _ in PHASES}
    shown = [(phase, label) for phase, _, label in PHASES if any(measured[phase])]
    height, top = 0.8 / max(1, len(shown)), 0.0
    for k, (phase, label) in enumerate(shown):
        ys = [j + (k - (len(shown) - 1) / 2) * height for j, got in enumerate(measured[phase]) if got]
        vals = [got for got in measured[phase] if got]
        top = max([top, *(max(v) / MIB for v in vals)])
        _bars(ax, ys, vals, height, PHASE_COLOR[phase], label, MIB)
    _rows(ax, list(runs), slots)
    return top, {phase for phase, _ in shown}


def _curves(runs: dict[str, list[dict[str, Any]]]) -> dict[str, list[tuple[float, float]]]:
    """Memory sampled over training steps (MiB), the first repeat of each variant that recorded it."""
    out = {}
    for variant, rs in runs.items():
        try:
            pts = sorted(metrics.field(min(rs, key=lambda r: r["repeat"]), "memory.over_steps"))
        except NotMeasured:
            continue
        out[variant] = [(p[0], p[1] / MIB) for p in pts]
    return out


def highlighted(curves: dict[str, list[tuple[float, float]]]) -> list[str]:
    """At most MAX_SERIES variants to draw in colour, in the order of their colours: the named ones (fixed,
    as_posted, ...), then the single pitfalls whose peak or last reading lies furthest from the first named one's."""
    named = [v for v in curves if not v.startswith("+")][:MAX_SERIES]
    base = curves[named[0]] if named else None

    def distance(v: str) -> float:
        if base is None:
            return 0.0
        ys, ref = [p[1] for p in curves[v]], [p[1] for p in base]
        return max(abs(max(ys) - max(ref)), abs(ys[-1] - ref[-1]))
    singles = sorted((v for v in curves if v.startswith("+")), key=lambda v: (-distance(v), v))
    return named + singles[:MAX_SERIES - len(named)]


def _over_steps(ax: Axes, runs: dict[str, list[dict[str, Any]]]) -> float:
    """The highlighted variants in colour, any others in grey behind them; returns the highest point (MiB)."""
    curves = _curves(runs)
    shown = highlighted(curves)
    for variant, pts in curves.items():
        if variant not in shown:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=CONTEXT_COLOR, linewidth=0.8, gid=CONTEXT,
                    zorder=1)
    for i, variant in enumerate(shown):
        pts = curves[variant]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=variant, color=CYCLE[i % len(CYCLE)], zorder=2,
                linewidth=1.0 if variant.startswith("+") else 2.0, linestyle="--" if variant.startswith("+") else "-")
    ax.set_ylabel("MiB")
    if shown:
        handles, labels = ax.get_legend_handles_labels()
        if len(curves) > len(shown):
            from matplotlib.lines import Line2D
            handles.append(Line2D([], [], color=CONTEXT_COLOR, linewidth=0.8))
            labels.append(f"{len(curves) - len(shown)} other variants")
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, borderaxespad=0)
    return max((p[1] for pts in curves.values() for p in pts), default=0.0)


# --- what makes a figure readable, checked -------------------------------------------------------------------

def problems(fig: Figure) -> list[str]:
    """The figure rendered, then what a reader could not read: two texts that overlap, a text cut by the
    canvas's edge, a panel with more than MAX_SERIES series. Empty when the figure is readable."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()      # type: ignore[attr-defined]
    canvas = fig.bbox
    found = []
    boxes = [(t, t.get_window_extent(renderer)) for t in _texts(fig)]
    for i, (a, box_a) in enumerate(boxes):
        if box_a.x0 < canvas.x0 - 1 or box_a.y0 < canvas.y0 - 1 or box_a.x1 > canvas.x1 + 1 or \
                box_a.y1 > canvas.y1 + 1:
            found.append(f"text {_cut(a.get_text())!r} leaves the figure")
        for b, box_b in boxes[i + 1:]:
            if min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 1 and \
                    min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 1:
                found.append(f"text {_cut(a.get_text())!r} overlaps {_cut(b.get_text())!r}")
    for ax in fig.axes:
        n = series(ax)
        if n > MAX_SERIES:
            found.append(f"panel {_cut(ax.get_title(loc='left') or ax.get_title()) or '(untitled)'!r} has {n} "
                         f"series, more than {MAX_SERIES}")
    return found


def _cut(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _texts(fig: Figure) -> list[Text]:
    """Every text the renderer draws: titles, labels, legends, and the tick labels of ticks inside the view."""
    from matplotlib.text import Text
    ticks, drawn = set(), []
    for ax in fig.axes:
        for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                ticks |= {id(tick.label1), id(tick.label2)}
                if min(lo, hi) - 1e-9 <= tick.get_loc() <= max(lo, hi) + 1e-9:
                    drawn += [lab for lab in (tick.label1, tick.label2) if _shown(lab)]
    others = [t for t in fig.findobj(Text) if id(t) not in ticks and isinstance(t, Text) and _shown(t)]
    return drawn + others


def _shown(t: Text) -> bool:
    return bool(t.get_visible() and t.get_text().strip() and (t.axes is None or t.axes.get_visible()))


def series(ax: Axes) -> int:
    """The series a reader must tell apart in one panel: each bar group, line or scatter, leaving out whiskers
    and the grey context lines (gid CONTEXT) drawn behind highlighted ones."""
    from matplotlib.container import BarContainer, ErrorbarContainer
    parts = set()
    for c in ax.containers:
        errorbars = [c] if isinstance(c, ErrorbarContainer) else [getattr(c, "errorbar", None)]
        for e in errorbars:
            if e is not None:
                parts |= {id(a) for a in _flat(e)}
    bars = sum(isinstance(c, BarContainer) for c in ax.containers)
    lines = [a for a in [*ax.lines, *ax.collections] if id(a) not in parts and a.get_gid() != CONTEXT]
    return bars + len(lines)


def _flat(items: Any) -> Iterator[Any]:
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from _flat(item)
        elif item is not None:
            yield item


class Drawn(NamedTuple):
    """One of each experiment's figures: its file's suffix, what it shows, whether it has anything to, and how
    it is drawn."""
    suffix: str
    what: str
    shows: Callable[[ByVariant], bool]
    draw: Callable[[ByVariant], Figure]


DRAWN = (Drawn("throughput", "samples/s per variant and framework", _measured_throughput, throughput),
         Drawn("memory", "peak memory by phase, and memory over training steps", lambda bv: bool(_ran(bv)), memory))
KINDS = {d.suffix: d for d in DRAWN}
SCALING = "scaling"         # a swept experiment's figure, from its runs at every device count
WHAT = {**{d.suffix: d.what for d in DRAWN}, SCALING: "throughput against the devices one run held, with ideal scaling"}


def styled(draw: Callable[[ByVariant], Figure], by_variant: ByVariant) -> Figure:
    """One of DRAWN's figures of an experiment, in the report's style; reached only once _matplotlib() found it."""
    with _matplotlib().rc_context(STYLE):       # type: ignore[union-attr]
        return draw(by_variant)


def scaling(sweep: Sweep) -> Figure:
    """Throughput against the devices one run held, one line per framework (medians over its repeats), with ideal
    scaling from its run at one device drawn dashed; reached only once _matplotlib() found it."""
    with _matplotlib().rc_context(STYLE):       # type: ignore[union-attr]
        fig = _figure(6.0, 3.6)
        ax = fig.subplots()
        for fw, counts in sweep.items():
            points = sorted((n, median(rates)) for n, rs in counts.items() if (rates := scaling_section.throughput(rs)))
            if not points:
                continue
            colour = REGISTRY[fw].colour
            ax.plot([n for n, _ in points], [v for _, v in points], "o-", color=colour, label=LABELS[fw])
            one = dict(points).get(1)
            if one:
                ax.plot([n for n, _ in points], [one * n for n, _ in points], "--", color=colour, alpha=0.5,
                        label=f"{LABELS[fw]}, ideal")
        ax.set_xlabel("devices one run holds")
        ax.set_ylabel("training samples/s (all processes)")
        ax.set_xticks(sorted({n for counts in sweep.values() for n in counts}))
        ax.set_ylim(bottom=0)
        ax.legend(frameon=False)
    return fig


@contextmanager
def drawing(report_dir: Path, grouped: Grouped, sweeps: dict[str, Sweep]) -> Iterator[dict[str, list[tuple[str, str]]]]:
    """Each experiment's figures that have anything to show, and each swept one's scaling figure, drawn beside the
    report while the caller goes on (forked.side_by_side) and awaited as it ends; yields at once experiment ->
    [(what it shows, file name relative to report_dir)]. Memory's figures start first: with a panel per framework
    and column they take longest, so the last figure to start is a short one."""
    can = _matplotlib() is not None     # the workers import the rest of it, beside this process's own work
    planned = {experiment: [d.suffix for d in DRAWN if can and experiment in grouped and d.shows(grouped[experiment])]
               + ([SCALING] if can and experiment in sweeps else []) for experiment in sorted({*grouped, *sweeps})}
    jobs = sorted(((report_dir, experiment, suffix) for experiment, suffixes in planned.items() for suffix in suffixes),
                  key=lambda job: job[2] != "memory")
    with forked.side_by_side(_draw, (grouped, sweeps), jobs) as drawn:
        yield {experiment: [(WHAT[suffix], _file(experiment, suffix)) for suffix in suffixes]
               for experiment, suffixes in planned.items()}
        drawn()


def _file(experiment: str, suffix: str) -> str:
    return f"{_slug(experiment)}-{suffix}.png"


def _draw(shared: tuple[Grouped, dict[str, Sweep]], job: tuple[Path, str, str]) -> None:
    (grouped, sweeps), (report_dir, experiment, suffix) = shared, job
    with _cyclic_gc_paused():
        fig = scaling(sweeps[experiment]) if suffix == SCALING else styled(KINDS[suffix].draw, grouped[experiment])
        _save(fig, report_dir / _file(experiment, suffix))


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Importing matplotlib and drawing a figure make hundreds of thousands of objects, which the cyclic collector
    scanned about 150 times for a report's first experiment; a figure holds no garbage that cannot wait for the
    next, so the collector is paused while each is drawn (the store pauses it while loading for the same
    reason)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

"""Each pitfall's share of the gap, for the report: a table per claimed ratio and framework pair, one waterfall
plot per experiment from as_posted to fixed, and one first-screen line. The figures come from
reprokit/results/shares.py; this module only words and draws them.

For the lead to wire in (document.py, first_screen.py):

- ``decompositions(exp_name, by_variant, found) -> list[Decomposition]``: what the rest take;
- ``section(decs) -> str | None``: the body under ``"### " + heading(exp_name)``; ``DETAILS``: its method, a
  section of details.md;
- ``write_plot(report_dir, exp_name, decs, what_ran) -> tuple[caption, file] | None``: the waterfall PNG, its
  caption to print below it (``SUFFIX`` joins document.PLOT_SUFFIXES); ``figure(decs)``: the figure alone;
- ``first_screen_line(decs) -> str | None``: one line for the seed's answers.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.claims.verdicts import Verdict, posted_gap
from reprokit.kits.contract.names import LABELS, REFERENCE, others
from reprokit.kits.contract.pitfalls import PITFALLS
from reprokit.report import plots
from reprokit.report.first_screen import DEFAULT_HEADLINES
from reprokit.report.markdown import anchor, md, short, table
from reprokit.results import metrics, shares
from reprokit.results.runs import NUMERICS
from reprokit.results.shares import Decomposition, Span

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SUFFIX = "-waterfall.png"
MAX_BARS = 5        # factors drawn one by one; the rest share one "others" bar (at most 6 factor bars)
RAISES, LOWERS, GREY, ENDS, JOINT = "#D55E00", "#0072B2", "#999999", "#555555", "#CC79A7"   # Okabe-Ito
DETAILS_ANCHOR = "each-factors-share-of-the-gap"     # DETAILS's heading in details.md
DETAILS = (
    "## Each factor's share of the gap\n\n"
    "The ablation runs each of as_posted's factors (its pitfalls, and its numerics: each framework's own TF32 and "
    "cuDNN defaults) added alone to fixed (`+factor`) and removed alone from as_posted (`-factor`); a change that "
    "touches one framework only runs in that one and is held against the other framework's run of the same "
    "configuration (fixed for `+`, as_posted for `-`).\n\n"
    "On the log of the ratio R, the gap is log R(as_posted) - log R(fixed). A factor's share is the mean of its "
    "two single-change effects, added alone and removed alone: its Shapley value over the two orders that put it "
    "first and last. A pair that interacts splits its interaction between the two.\n\n"
    "The interaction is the gap less the shares: what the single changes leave unexplained, from interactions of "
    "three or more factors. Per factor, removed over added says how far its effect depends on the others being "
    "there (1x: not at all). Every figure is shown as a factor on the ratio.\n\n"
    "Intervals: a 95% percentile bootstrap (2,000 resamples, seeded). Each configuration's repeats are resampled "
    "on their own, with one draw wherever one set of runs stands for several variants, and each figure is "
    "computed from every draw. With two or three repeats such an interval covers less than 95%.\n\n"
    "A configuration with a single repeat resamples its epochs instead, for the per-epoch time quantities: that "
    "interval shows epoch-to-epoch noise, not run-to-run. Any other figure with a single repeat has no interval.\n\n"
    + shares.RULE)


def _quantities(exp_name: str, found: Iterable[Verdict]) -> list[tuple[str, str]]:
    """The claims' ratio quantities of one framework over another (those as posted first), else the defaults."""
    posted: list[tuple[str, str]] = []
    other: list[tuple[str, str]] = []
    for v in found:
        c = v.claim
        if c.experiment != exp_name or c.kind not in ("ratio", "effect_disappears_with_fix"):
            continue
        a, b = c.operands["numerator"], c.operands["denominator"]
        if a.framework != b.framework and a.quantity == b.quantity:
            (posted if posted_gap(c) else other).append((a.quantity, a.reading))
    return list(dict.fromkeys(posted + other)) or list(DEFAULT_HEADLINES)


def decompositions(exp_name: str, by_variant: dict[str, dict[str, list[dict[str, Any]]]],
                   found: Iterable[Verdict]) -> list[Decomposition]:
    """Per claimed ratio quantity (the headline first) and the reference against each other framework that ran:
    the gap's decomposition, where the results hold both ends and at least one factor's single changes."""
    present = {fw for fws in by_variant.values() for fw in fws}
    out = []
    for quantity, reading in _quantities(exp_name, found):
        for other in others(present):
            d = shares.decompose(by_variant, exp_name, quantity, reading, REFERENCE, other)
            if d is not None and d.shares:
                out.append(d)
    return out


def _name(factor: str) -> str:
    return "as_posted's numerics" if factor == NUMERICS else factor


def _what(factor: str) -> str:
    if factor == NUMERICS:
        return "each framework's own TF32 and cuDNN defaults"
    return short(PITFALLS[factor]["summary"], 80) if factor in PITFALLS else ""


def _pair(d: Decomposition) -> str:
    return f"{LABELS[d.numerator]} / {LABELS[d.denominator]}, {metrics.QUANTITIES[d.quantity].short}"


def _head(d: Decomposition) -> str:
    reading = f" ({d.reading} reading)" if d.reading != "reported" else ""
    return (f"**{md(_pair(d))}**{reading}: as posted {d.posted.text()}, fixed {d.fixed.text()}, gap "
            f"{d.gap.text()}; intervals from {d.method if d.method != shares.NONE else 'nothing: single repeats'}.")


def _table(d: Decomposition) -> str:
    rows = [[f"`{_name(s.factor)}`", md(_what(s.factor)), s.added.text(), s.removed.text(), f"**{s.share.text()}**",
             s.depends.text()] for s in d.shares]
    if d.interaction is not None:
        rows.append(["interaction", "what the single changes leave unexplained", "", "", f"**{d.interaction.text()}**",
                     ""])
    rows.append(["gap", "as posted over fixed", "", "", f"**{d.gap.text()}**", ""])
    body = table(rows, ["factor", "what it changes", "added alone to fixed", "removed alone from as posted",
                        "share", "removed / added"])
    if d.unmeasured:
        missing = "; ".join(f"`{_name(f)}`: {md(why)}" for f, why in d.unmeasured)
        body += f"\n\nNot decomposed, so no interaction: {short(missing, 300)}."
    return body


def heading(exp_name: str) -> str:
    """The section's heading in report.md (the first-screen line links to it)."""
    return f"Each factor's share of the gap: {exp_name}"


def section(decs: list[Decomposition]) -> str | None:
    """The tables of one experiment, each under its ratio and its ends."""
    if not decs:
        return None
    parts = ["The gap from `fixed` to `as_posted`, factor by factor: each share is the mean of the factor's two "
             f"single changes, as a factor on the ratio; [how it is computed](details.md#{DETAILS_ANCHOR})."]
    for d in decs:
        parts += [_head(d), _table(d)]
    return "\n\n".join(parts)


def first_screen_line(decs: list[Decomposition]) -> str | None:
    """'- **Of the 1.40x as posted** (PyTorch / TensorFlow, total time): `tf_batch_of_one` accounts for 1.25x
    (1.20–1.31), the rest 1.12x, of which 1.08x remains once fixed.', for the headline decomposition of each pair."""
    lines = []
    for d in decs:
        if d.quantity != decs[0].quantity:
            continue
        top = d.shares[0]
        rest = Span(d.posted.value - top.share.value)
        lines.append(f"- **Of the {d.posted.ratio:.2f}x as posted** ({md(_pair(d))}): `{_name(top.factor)}` "
                     f"accounts for {top.share.text()}, the rest {rest.text()}, of which {d.fixed.text()} remains "
                     f"once fixed: [each factor's share](#{anchor(heading(d.experiment))}).")
    return "\n".join(lines) or None


# --- the waterfall ------------------------------------------------------------------------------------------

def _steps(d: Decomposition) -> list[tuple[str, float, float, Span | None, str]]:
    """(label, from, to, the share's interval, colour) per bar, in log units, from as posted down to fixed."""
    bars: list[tuple[str, float, float, Span | None, str]] = [("as posted", 0.0, d.posted.value, None, ENDS)]
    level = d.posted.value
    shown, rest = d.shares[:MAX_BARS], d.shares[MAX_BARS:]
    if len(rest) == 1:
        shown, rest = d.shares, ()
    for s in shown:
        bars.append((f"- {_name(s.factor)}", level, level - s.share.value, s.share,
                     RAISES if s.share.value > 0 else LOWERS))
        level -= s.share.value
    if rest:
        total = sum(s.share.value for s in rest)
        bars.append((f"- the other {len(rest)}", level, level - total, None, GREY))
        level -= total
    if d.interaction is not None:
        bars.append(("- interaction", level, level - d.interaction.value, d.interaction, JOINT))
    bars.append(("fixed", 0.0, d.fixed.value, None, ENDS))
    return bars


def _panel(ax: Axes, d: Decomposition) -> None:
    """Horizontal bars, as posted at the top down to fixed, on a log axis of the ratio: labels stay horizontal."""
    bars = _steps(d)
    spans = [sorted((math.exp(start), math.exp(end))) for _, start, end, _, _ in bars]
    # one series: the whole walk is one bar group, in the colours of what each step is
    ax.barh(range(len(bars)), [hi - lo for lo, hi in spans], 0.6, left=[lo for lo, _ in spans],
            color=[b[4] for b in bars])
    # each share's interval where its bar ends: the level before it less the share's low and high
    whiskers = [(i, math.exp(end), sorted((math.exp(start - span.high), math.exp(start - span.low))))
                for i, (_, start, end, span, _) in enumerate(bars)
                if span is not None and span.low is not None and span.high is not None]
    if whiskers:
        ax.errorbar([w[1] for w in whiskers], [w[0] for w in whiskers], fmt="none", capsize=2, linewidth=1,
                    xerr=[[w[1] - w[2][0] for w in whiskers], [w[2][1] - w[1] for w in whiskers]], color="#333333")
    # the two ends also as a mark, which stays visible where a ratio is 1x and its bar has no length
    ends = [i for i, b in enumerate(bars) if b[4] == ENDS]
    ax.plot([math.exp(bars[i][2]) for i in ends], ends, "D", color="#000000", markersize=4)
    ax.axvline(1.0, color="#333333", linewidth=0.6)
    ax.set_xscale("log")
    _ratio_ticks(ax, [x for lo, hi in spans for x in (lo, hi)] + [x for w in whiskers for x in w[2]])
    ax.set_yticks(range(len(bars)), [b[0] for b in bars])
    ax.set_ylim(len(bars) - 0.4, -0.6)          # as posted on top
    ax.set_xlabel(f"{LABELS[d.numerator]} / {LABELS[d.denominator]}, {metrics.QUANTITIES[d.quantity].short} "
                  f"(log scale)")


# Round ratios for the ticks: 1, 2 and 5 in every decade, and finer ones near 1x.
FINE = (0.5, 0.67, 0.75, 0.8, 0.9, 1.1, 1.25, 1.5, 3.0, 4.0)


def _ratio_ticks(ax: Axes, values: list[float]) -> None:
    """Ticks at round ratios ("0.5x", "1x", "2x"), 1x always, none closer than a seventh of the drawn range (so
    their labels keep apart), no minor labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    lo, hi = min([1.0, *values]) / 1.08, max([1.0, *values]) * 1.08
    ax.set_xlim(lo, hi)
    gap = max(math.log(hi / lo) / 7, math.log(1.2))
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    candidates = sorted({float(f"{m * 10.0 ** k:.12g}") for k in decades for m in (1, 2, 5)} | set(FINE))
    ticks = [1.0]
    for t in (c for c in candidates if 1.0 < c <= hi):
        if math.log(t / ticks[-1]) >= gap:
            ticks.append(t)
    for t in (c for c in reversed(candidates) if lo <= c < 1.0):
        if math.log(ticks[0] / t) >= gap:
            ticks.insert(0, t)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_locator(NullLocator())


def figure(decs: list[Decomposition]) -> Figure | None:
    """The waterfall of the headline decomposition, one panel per framework pair; None without matplotlib or a
    decomposition. It holds no caption: the report prints ``caption`` under it."""
    mpl = plots._matplotlib()
    head = [d for d in decs if d.quantity == decs[0].quantity] if decs else []
    if mpl is None or not head:
        return None
    rows = max(len(_steps(d)) for d in head)
    with mpl.rc_context(plots.STYLE):
        fig = plots._figure(6.5 * len(head), 0.3 * rows + 1.2)
        for i, d in enumerate(head):
            _panel(fig.add_subplot(1, len(head), i + 1), d)
    return fig


def caption(what_ran: str, decs: list[Decomposition]) -> str:
    """The waterfall's caption, printed below it in the report."""
    d = decs[0]
    grouped = len(d.shares) - MAX_BARS if len(d.shares) > MAX_BARS + 1 else 0
    rest = f"; the other {grouped} together in grey" if grouped else ""
    return (f"{what_ran}: {_pair(d)}, from as posted to fixed. Each bar removes one factor's share (orange: it "
            f"raised the ratio as posted, blue: lowered it{rest}), then the interaction (pink); whiskers: the "
            f"share's interval ({d.method}).")


def write_plot(report_dir: Path, exp_name: str, decs: list[Decomposition],
               what_ran: str) -> tuple[str, str] | None:
    """The experiment's waterfall beside the report: (its caption, its file name), or None where none is drawn."""
    fig = figure(decs)
    if fig is None:
        return None
    name = f"{plots._slug(exp_name)}{SUFFIX}"
    plots._save(fig, report_dir / name)
    return caption(what_ran, decs), name

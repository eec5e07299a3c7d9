"""The ablation table of one experiment: fixed, each pitfall alone and the named variants, each against fixed.

Its own module because it is the one table across an experiment's variants: a row per framework and variant,
short notes under it, and the same facts in full for details.md (the ablation explanation's own part).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reprokit.kits.contract.names import FRAMEWORKS, LABELS, joined
from reprokit.kits.contract.result_header import KIT_INPUT
from reprokit.report import explanations
from reprokit.report.markdown import md, short, table
from reprokit.results import metrics, runs, units
from reprokit.results.metrics import NotMeasured
from reprokit.results.runs import FIXED


def ablation(by_variant: dict[str, dict[str, list[dict[str, Any]]]]) -> str | None:
    """Rows: fixed, each pitfall alone, the named variants; columns against fixed of the same framework. Under the
    table, one short line each: a named variant's pitfalls, the inputs other than the kit's own batches."""
    variants = runs.variant_order(by_variant)
    if len(variants) < 2:
        return None
    rows = []
    for fw in FRAMEWORKS:
        base = by_variant.get(runs.main_variant(by_variant), {}).get(fw, [])
        for variant in variants:
            rs = by_variant[variant].get(fw)
            if not rs:
                if base and _posted_without(by_variant, variant, fw):
                    rows.append([LABELS[fw], md(variant), f"not run: no posted code in {LABELS[fw]}",
                                 *["not run"] * 6])
                continue
            pitfalls = rs[0]["spec"].get("pitfalls", [])
            if variant == FIXED:
                what = "nothing: the experiment as declared"
            elif variant.startswith(runs.ADDED) and len(pitfalls) == 1:
                what = short(rs[0]["spec"].get("pitfall_summaries", {}).get(pitfalls[0], pitfalls[0]), 100)
            elif variant.startswith(runs.REMOVED):
                what = f"{runs.POSTED} without {variant[1:]}"
            elif pitfalls:
                what = f"its {len(pitfalls)} pitfall(s) together (below)"
            else:
                what = "no pitfall switch of the kit's"
            rows.append([LABELS[fw], md(variant), md(what),
                         _against(rs, base, "samples_per_s", lambda v: f"{v:,.1f}", variant),
                         _against(rs, base, "train_time_per_epoch_s", lambda v: f"{v:.1f}", variant),
                         _against(rs, base, "peak_memory_bytes", units.memory, variant),
                         _phases(rs),
                         _median(rs, "memory_growth", "{:+.1%}".format),
                         _accuracy(rs, base, variant)])
    out = table(rows, ["framework", "variant", "what it changes", "samples/s (vs fixed)",
                       "train time per epoch, s (vs fixed)", "peak memory (vs fixed)",
                       "phase peaks: training / evaluation", "memory growth over steps",
                       "final test accuracy (vs fixed)"])
    notes = [f"How to read it: {explanations.link(explanations.ABLATION)}."]
    notes += [f"- {line}" for line in _named(by_variant, 300)]
    notes += [f"- Inputs other than the kit's own batches: {short(line, 300)}" for line in _readers(by_variant)]
    dagger = any(metrics.field(r, "metrics.averaged_over") == "batches"
                 for fws in by_variant.values() for rs in fws.values() for r in rs[:1])
    return out + "\n\n" + "\n".join(notes) + (
        "\n\n† The run reported accuracy per batch, as the posted code did; shown here per sample." if dagger else "")


def ablation_details(by_variant: dict[str, dict[str, list[dict[str, Any]]]]) -> str | None:
    """details.md: each named variant's pitfalls, the phase peaks' sources and the inputs, in full."""
    lines = [f"- {line}" for line in _named(by_variant)]
    sources = sorted({src for fws in by_variant.values() for rs in fws.values() for r in rs[:1]
                      for src in [_phase_source(r)] if src})
    if sources:
        lines.append("- Phase peaks, the reported reading of each phase (warmup apart): " + "; ".join(
            md(s) for s in sources) + ".")
    lines += [f"- Inputs other than the kit's own batches: {line}" for line in _readers(by_variant)]
    return "\n".join(lines) or None


def _posted_without(by_variant: dict[str, dict[str, list[dict[str, Any]]]], variant: str, fw: str) -> bool:
    """Is ``variant`` a named variant of posted code (its runs have pitfalls) that ``fw`` has none of, so the plan
    ran none of it there (reprokit/plan/plan.py not_run)? Its single changes follow it unsaid."""
    named = variant != FIXED and not variant.startswith((runs.ADDED, runs.REMOVED))
    return named and fw not in by_variant[variant] and any(
        rs[0]["spec"].get("pitfalls") for rs in by_variant[variant].values() if rs)


def _named(by_variant: dict[str, dict[str, list[dict[str, Any]]]], limit: int | None = None) -> list[str]:
    """One line per named variant and framework: the pitfalls it runs together."""
    lines = []
    for variant in runs.variant_order(by_variant):
        if variant == FIXED or variant.startswith((runs.ADDED, runs.REMOVED)):    # a single change: its name says it
            continue
        for fw in FRAMEWORKS:
            pitfalls = by_variant[variant].get(fw, [{}])[0].get("spec", {}).get("pitfalls", [])
            if pitfalls:
                names = ", ".join(pitfalls)
                lines.append(f"`{md(variant)}` ({LABELS[fw]}), {len(pitfalls)} pitfall(s) together: "
                             f"{md(short(names, limit) if limit else names)}.")
    return lines


def _readers(by_variant: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
    """The inputs other than the kit's own batches, each once with the variants that read it."""
    by_input: dict[tuple[str, str], list[str]] = {}
    for variant in runs.variant_order(by_variant):
        for fw, rs in sorted(by_variant[variant].items(), key=lambda item: FRAMEWORKS.index(item[0])):
            read = rs[0].get("effective", {}).get("input", KIT_INPUT)
            if read != KIT_INPUT:
                by_input.setdefault((fw, read), []).append(f"`{md(variant)}`")
    return [f"{joined(vs)} ({LABELS[fw]}): {md(read)}." for (fw, read), vs in by_input.items()]


def _phase_source(r: dict[str, Any]) -> str | None:
    try:
        return metrics.phase_peaks(r, "train")[0][2]
    except NotMeasured:
        return None


def _phases(rs: list[dict[str, Any]]) -> str:
    train, evaluation = (_median(rs, q, units.memory) for q in ("train_peak_memory_bytes", "eval_peak_memory_bytes"))
    return train if train == evaluation == "not measured" else f"{train} / {evaluation}"


def _median(rs: list[dict[str, Any]], quantity: str, show: Callable[[float], str]) -> str:
    try:
        return show(metrics.median(rs, quantity))
    except NotMeasured as exc:
        return exc.short


def _against(rs: list[dict[str, Any]], base: list[dict[str, Any]], quantity: str, show: Callable[[float], str],
             variant: str) -> str:
    try:
        v = metrics.median(rs, quantity)
    except NotMeasured as exc:
        return exc.short
    try:
        ref = metrics.median(base, quantity) if variant != FIXED else None
    except NotMeasured:
        ref = None
    return show(v) + (f" ({v / ref:.2f}x)" if ref else "")


def _accuracy(rs: list[dict[str, Any]], base: list[dict[str, Any]], variant: str) -> str:
    try:
        acc = metrics.median(rs, "final_test_accuracy")
    except NotMeasured as exc:
        return exc.short
    mark = " †" if metrics.field(rs[0], "metrics.averaged_over") == "batches" else ""
    try:
        delta = f" ({acc - metrics.median(base, 'final_test_accuracy'):+.3f})" if variant != FIXED else ""
    except NotMeasured:
        delta = ""
    return f"{acc:.3f}{mark}{delta}"

"""Scaling, side by side: one to N devices per framework, strong or weak as the runs really scaled.

Per experiment that ran at more than one device count (``--devices 1,2,4``): per framework and count, the
throughput of all its processes, the time per epoch, the step time (p50, p95), the share of a step its ranks spent
in the gradients' collectives and waiting (its span from the end of the forward pass to the optimizer step, over
the same span at one device), and the scaling efficiency against one device with its interval from the repeats;
each framework's scaling read from the batches its runs took, never from flags (``label``); the reference's
throughput over each other framework's at each count, and the count where the faster framework changes. A pair
whose frameworks scaled differently compares different work at N: the first screen says so (``mismatch``).
"""
from __future__ import annotations

from collections import defaultdict
from statistics import median
from typing import Any

from reprokit.kits.contract.names import FRAMEWORKS, LABELS, REFERENCE, label
from reprokit.report import certified_at_n, gpu_models
from reprokit.report.markdown import md, table
from reprokit.results import metrics, runs, stats
from reprokit.results.metrics import NotMeasured

Sweep = dict[str, dict[int, list[dict[str, Any]]]]         # framework -> devices -> finished repeats
STRONG, WEAK, NEITHER, UNKNOWN = "strong", "weak", "neither", "unknown (batch not observed)"


def sweeps(results: list[dict[str, Any]]) -> dict[str, Sweep]:
    """experiment -> its main variant's runs by framework and device count, where it ran at more than one count."""
    by: dict[str, dict[str, dict[str, dict[int, list[dict[str, Any]]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list))))
    for r in results:
        if r["status"] == "ok":
            by[r["experiment"]][r["variant"]][r["framework"]][runs.devices(r)].append(r)
    out = {}
    for experiment, variants in by.items():
        main = runs.main_variant(variants)
        sweep = variants.get(main) or {}
        if len({n for counts in sweep.values() for n in counts}) > 1:
            out[experiment] = dict(sweep)
    return out


def _global_batch(r: dict[str, Any]) -> float | None:
    total = (r.get("processes") or {}).get("total") or {}
    batch = total.get("global_batch")
    if batch is None and not r.get("processes"):
        batch = ((r.get("effective") or {}).get("batch_size") or {}).get("configured")
    return batch


def _devices_seen(r: dict[str, Any]) -> int:
    """The devices the run's batches were split over: its ranks (each with its replicas), else its replicas."""
    p = r.get("processes") or {}
    return max(1, p.get("ranks") or 0) * max(1, p.get("replicas") or 1) if p else 1


def label_of(counts: dict[int, list[dict[str, Any]]]) -> str:
    """strong: the global batch held while each device's shrank; weak: each device's held while the global grew;
    read from the batches the runs took at each count."""
    batches = {n: _global_batch(rs[0]) for n, rs in counts.items()}
    seen = {n: (float(b), _devices_seen(counts[n][0])) for n, b in batches.items() if b is not None}
    if len(seen) < len(batches):
        return UNKNOWN
    globals_ = {b for b, _ in seen.values()}
    per_device = {b / d for b, d in seen.values()}
    if len(globals_) == 1 and len(per_device) > 1:
        return STRONG
    if len(per_device) == 1 and len(globals_) > 1:
        return WEAK
    return NEITHER


def throughput(rs: list[dict[str, Any]]) -> list[float]:
    """Each run's training samples per second, all its processes' together."""
    out = []
    for r in rs:
        total = ((r.get("processes") or {}).get("total") or {}).get("samples_per_s")
        if total:
            out.append(total)
            continue
        try:
            out.append(metrics.collect([r], "samples_per_s").values[0])
        except (NotMeasured, IndexError):
            continue
    return out


def _spans(rs: list[dict[str, Any]]) -> float | None:
    """The median span from a step's forward pass to its optimizer step: a probed script's, or a kit run's
    (reprokit/kits/measurement/backward_spans.py)."""
    found = [s for r in rs for s in (((r.get("probe") or {}).get("evidence") or {}).get("backward_span_s")
                                     or (r.get("timing") or {}).get("backward_span_s") or [])]
    return median(found) if found else None


def _cell(rs: list[dict[str, Any]], quantity: str, scale: float = 1.0, unit: str = "") -> str:
    values = metrics.collect(rs, quantity).values
    return f"{median(values) * scale:.3g}{unit}" if values else "not measured"


def _efficiency(rates: dict[int, list[float]], n: int) -> str:
    if 1 not in rates or not rates[1] or not rates.get(n):
        return "not measured (no run at 1 device)" if 1 not in rates else "not measured"
    r = stats.ratio(rates[n], rates[1])
    bracket = f" ({r.low / n:.0%}–{r.high / n:.0%})" if r.low is not None and r.high is not None else ""
    return f"{r.value / n:.0%}{bracket}"


def _rows(fw: str, counts: dict[int, list[dict[str, Any]]]) -> list[list[str]]:
    rates = {n: throughput(rs) for n, rs in counts.items()}
    one = _spans(counts.get(1, []))
    rows = []
    for n in sorted(counts):
        rs = counts[n]
        span, step = _spans(rs), metrics.collect(rs, "step_time_p50_s").values
        share = (f"{max(0.0, span - one) / median(step):.0%}" if span is not None and one is not None and step
                 else "not measured")
        seen = _devices_seen(rs[0])
        note = f" (ran on {seen})" if seen != n else ""
        rows.append([LABELS[fw], f"{n}{note}", f"{median(rates[n]):,.0f}" if rates[n] else "not measured",
                     _cell(rs, "train_time_per_epoch_s", unit=" s"), _cell(rs, "step_time_p50_s", 1e3, " ms"),
                     _cell(rs, "step_time_p95_s", 1e3, " ms"), share, _efficiency(rates, n),
                     f"{_global_batch(rs[0]) or 'not observed'}"])
    return rows


def mismatch(sweep: Sweep) -> str | None:
    """The first screen's sentence where the frameworks scaled differently: their ratio at N compares different
    work (tensorflow #33809's confusion)."""
    labels = {fw: label_of(counts) for fw, counts in sweep.items()}
    if len(set(labels.values())) < 2 or UNKNOWN in labels.values():
        return None
    said = ", ".join(f"{label(fw)} {how}" for fw, how in labels.items())
    return f"- **Scaled differently:** {said}: their ratio at more than one device compares different work."


def _ratios(sweep: Sweep) -> list[str]:
    """The reference's throughput over each other framework's at each count, and where the faster one changes."""
    lines = []
    for other in (fw for fw in FRAMEWORKS if fw in sweep and fw != REFERENCE):
        if REFERENCE not in sweep:
            break
        shown, faster = [], []
        for n in sorted(set(sweep[REFERENCE]) & set(sweep[other])):
            a, b = throughput(sweep[REFERENCE][n]), throughput(sweep[other][n])
            if a and b:
                r = stats.ratio(a, b)
                shown.append(f"{n}: {r.text()}")
                faster.append((n, r.value >= 1))
        changes = [n for (m, was), (n, now) in zip(faster, faster[1:]) if was != now]
        change = (f"; the faster framework changes at {changes[0]} devices" if changes else
                  "; the same framework is faster at every count" if faster else "")
        lines.append(f"{label(REFERENCE)} / {label(other)} throughput at each device count: "
                     f"{'; '.join(shown) or 'not measured'}{change}.")
    return lines


def section(results: list[dict[str, Any]], plots: dict[str, list[tuple[str, str]]]) -> str | None:
    """The scaling section of every experiment that ran at more than one device count; None where none did."""
    parts = []
    for experiment, sweep in sweeps(results).items():
        rows = [row for fw in FRAMEWORKS if fw in sweep for row in _rows(fw, sweep[fw])]
        labels = "; ".join(f"{label(fw)} **{label_of(sweep[fw])}**" for fw in FRAMEWORKS if fw in sweep)
        cpu = all(r["spec"].get("device") == "cpu" for counts in sweep.values() for rs in counts.values() for r in rs)
        lines = [f"**{md(experiment)}**: scaling read from the batches the runs took: {labels}."]
        lines += _ratios(sweep)
        untimed = [label(fw) for fw in FRAMEWORKS if fw in sweep and _spans(sweep[fw].get(1, [])) is None]
        if untimed:
            lines.append(f"Collectives and waiting: not measured for {' and '.join(untimed)}, whose runs did not time "
                         f"the inside of their steps (a step that runs as one graph or compiled function is not).")
        lines += certified_at_n.lines(sweep)
        if cpu:
            lines.append("These ran on stand-in devices that share one machine's CPUs: their scaling says nothing "
                         "about GPUs.")
        lines += gpu_models.lines(sweep)
        plot = next((name for what, name in plots.get(experiment, []) if name.endswith("-scaling.png")), None)
        if plot:
            lines.append(f"![throughput against devices]({plot})")
        parts.append("\n\n".join([lines[0], table(rows, ["framework", "devices", "samples/s", "epoch (train)",
                                                          "step p50", "step p95", "collectives and waiting",
                                                          "efficiency vs 1", "global batch"]), *lines[1:]]))
    return "\n\n".join(parts) if parts else None

"""One small evaluator for every claim: measured figures from result files, a verdict, and why.

Nothing here knows a seed. A claim names a metric kind, its operands (quantity, framework,
variant, memory reading) and a tolerance; this module reads the operands through ``metrics``,
compares, and words the verdict from the numbers. Verdicts:

- ``reproduced`` / ``not reproduced``: the measured metric is inside / outside the tolerance
  (and, where the claim states a direction, points the published way). A reproduced ratio of two frameworks
  as posted reads "reproduced as posted, explained by <pitfall>" only where the ablation's measured shares
  say so (reprokit/results/shares.py explaining, RULE).
- ``not comparable``: the quantity cannot be measured on the profile or hardware used (an
  absolute GPU time on a CPU, a published GPU that no run matches); the reason says which.
- ``not measured``: the results lack the runs or the fields the claim needs; the reason says which.

Every verdict on the ``quick`` profile is marked indicative.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reprokit.claims.claims import MEMORY_PEAKS, QUANTITIES, Claim, Operand, reference
from reprokit.kits.contract.names import LABELS
from reprokit.results import metrics, shares, stats
from reprokit.results import runs as run_groups
from reprokit.results.metrics import NotMeasured
from reprokit.results.runs import POSTED
from reprokit.results.units import UNITS, fmt

REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE, NOT_MEASURED = (
    "reproduced", "not reproduced", "not comparable", "not measured")
STATUSES = (REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE, NOT_MEASURED)
LEARNED_MARGIN = 0.05       # above chance by more than this counts as learning in the summary
# What a metric kind's judge returns: (status, ours, why, run ids, the measured metric in base units).
Judged = tuple[str, str, str, tuple[str, ...], float]


def fmt_figure(fig: dict[str, Any]) -> str:
    """A published figure as posted, with its unit and, where it differs, its stated value."""
    if "text" in fig:
        return f"{fig['label']}: “{fig['text']}”"
    unit = fig["unit"]
    if "value" in fig:
        num = f"{fig['value']:g} {unit}"
    elif "range" in fig:
        num = f"{fig['range'][0]:g}–{fig['range'][1]:g} {unit}"
    elif "at_least" in fig:
        num = f"≥ {fig['at_least']:g} {unit}"
    else:
        num = f"≤ {fig['at_most']:g} {unit}"
    num = num.replace(" x", "x")
    shown = f"“{fig['posted']}” ({num})" if fig.get("posted") and fig["posted"] != f"{fig.get('value', '')}" else num
    return f"{fig['label']}: {shown}" + (f"; {fig['note']}" if fig.get("note") else "")


def posted_text(claim: Claim) -> str:
    """The published figures as short as they were posted: '42m 22s', '4GB / 12GB'."""
    return "; ".join(f.get("posted") or f.get("text") or fmt_figure(f) for f in claim.published)


# --- measuring operands over runs ---------------------------------------------------------------

@dataclass(frozen=True)
class Measured:
    value: float                    # the median over repeats
    values: tuple[float, ...]
    run_ids: tuple[str, ...]
    detail: str = ""                # what the reading is, where a reader needs to know
    memory_source: str = ""


def _select(results: list[dict[str, Any]], experiment: str, op: Operand,
            context: tuple[str, str]) -> list[dict[str, Any]]:
    """The finished runs of an operand. The planner runs identical pitfall sets once, under the first
    name (a variant whose only pitfall of this framework is p is also "+p"), so "+p" and "fixed" also
    match a run of another name with exactly those pitfalls."""
    profile, device = context
    same = [r for r in results if r["status"] == "ok" and r["experiment"] == experiment and r["profile"] == profile
            and r["framework"] == op.framework and r["spec"].get("device", "cpu") == device]
    named = [r for r in same if r["variant"] == op.variant]
    if named or not (op.variant == "fixed" or op.variant.startswith("+")):
        return named
    wanted = [] if op.variant == "fixed" else [op.variant[1:]]
    return [r for r in same if r["spec"].get("pitfalls") == wanted]


def measure(results: list[dict[str, Any]], experiment: str, op: Operand, context: tuple[str, str]) -> Measured:
    runs = _select(results, experiment, op, context)
    if not runs:
        raise NotMeasured(f"no finished run of {LABELS[op.framework]} / {op.variant} "
                          f"on the {context[0]} profile ({context[1]}) in these results")
    got = metrics.collect(runs, op.quantity, op.reading)
    median = got.median()
    detail = got.sources[0]
    if op.quantity in MEMORY_PEAKS:
        detail = f"{op.reading}: {detail}"
    if len(got.values) > 1 and op.quantity in ("memory_growth", "memory_growth_bytes_per_step"):
        detail += f"; median of {len(got.values)} runs"
    memory = QUANTITIES[op.quantity][0] in ("bytes", "bytes_per_step") or op.quantity == "memory_growth"
    reported = metrics.memory_readings(runs[0]).get("reported") if memory else None
    return Measured(median, got.values, got.run_ids, detail, reported.source if reported else "")


# --- verdicts -----------------------------------------------------------------------------------

@dataclass
class Verdict:
    claim: Claim
    status: str
    ours: str                           # short: what we measured
    why: str                            # the full reason, with the numbers
    profile: str | None = None
    device: str | None = None
    indicative: bool = False
    run_ids: tuple[str, ...] = ()
    value: float | None = None          # the measured metric, in base units, where one was computed
    explained_by: str | None = None     # the factor the measured shares say the gap as posted comes from

    @property
    def label(self) -> str:
        said = self.status + (f" as posted, explained by {self.explained_by}" if self.explained_by else "")
        return said + (" (indicative)" if self.indicative and self.status in (REPRODUCED, NOT_REPRODUCED) else "")


def contexts(claim: Claim, results: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The (profile, device) pairs the results cover for the claim's experiment."""
    order = {"quick": 0, "standard": 1, "full": 2}
    found = {(r["profile"], r["spec"].get("device", "cpu")) for r in results
             if r["status"] == "ok" and r["experiment"] == claim.experiment}
    return sorted(found, key=lambda c: (order.get(c[0], 9), c[1]))


def _device_names(results: list[dict[str, Any]], claim: Claim, context: tuple[str, str]) -> list[str]:
    return sorted({r["environment"]["device_name"] for op in claim.operands.values()
                   for r in _select(results, claim.experiment, op, context)})


def comparable_on(claim: Claim, profile: str, device: str) -> bool:
    """Whether the claim can be compared on this profile and device kind (a published GPU it names aside: which GPU
    ran is known from the results only)."""
    c = claim.comparable
    return profile in c.get("profiles", [profile]) and device in c.get("devices", [device])


def _incomparable(claim: Claim, context: tuple[str, str], names: list[str]) -> str | None:
    """Why the claim's quantity cannot be measured here, or None."""
    c = claim.comparable
    profile, device = context
    head = c.get("why", "a figure of the published setting")
    reasons = []
    if "profiles" in c and profile not in c["profiles"]:
        reasons.append(f"this run used the {profile} profile; comparable on {', '.join(c['profiles'])} only")
    if "devices" in c and device not in c["devices"]:
        reasons.append(f"measured on a {device} ({', '.join(names) or 'unknown device'}), "
                       f"not a {' or '.join(c['devices'])}")
    if "hardware_match" in c and not reasons:
        if not any(m.lower() in n.lower() for m in c["hardware_match"] for n in names):
            published_on = c.get("hardware", "the published hardware")
            reasons.append(f"published on {published_on}, measured on {', '.join(names) or 'unknown hardware'}"
                           + ("; no machine can match an unnamed one" if not c["hardware_match"] else "")
                           + "; only a ratio transfers between machines")
    return f"{head}: {'; '.join(reasons)}" if reasons else None


def _fmt_metric(claim: Claim, value: float, unit: str | None = None) -> str:
    if claim.kind == "value" and claim.operands["value"].quantity == "memory_growth" and not unit:
        return f"{value:+.1%}"
    return fmt(value, claim.dimension, unit)


def _reference_unit(claim: Claim) -> str | None:
    if claim.kind != "value":
        return None
    figs = claim.figures_for(claim.operands["value"])
    return figs[0]["unit"] if len(figs) == 1 else None


def band(claim: Claim) -> tuple[float, float, str]:
    """The accepted interval of the metric (base units) and how to say it."""
    dim = claim.dimension
    t = claim.tolerance
    bounds = claim.bounds()
    unit = t.get("unit")
    if bounds is not None:
        lo, hi = bounds
        if "range" in t:
            text = f"{_fmt_metric(claim, lo, unit)}–{_fmt_metric(claim, hi, unit)}"
        else:
            text = _fmt_metric(claim, lo if "at_least" in t else hi, unit)
        return lo, hi, text
    around = reference(claim)
    assert around is not None       # a claim without bounds has its tolerance around a published figure
    ref_lo, ref_hi = around
    ref_unit = _reference_unit(claim)
    ref = fmt(ref_lo, dim, ref_unit)
    if ref_hi != ref_lo:
        ref += f"–{fmt(ref_hi, dim, ref_unit)}"
    if "relative" in t:
        r = t["relative"]
        lo, hi = ref_lo * (1 - r), ref_hi * (1 + r)
        return lo, hi, f"±{r:.0%} of {ref}: {fmt(lo, dim, ref_unit)}–{fmt(hi, dim, ref_unit)}"
    a = t["absolute"] * (UNITS[unit][1] if unit else 1.0)
    return ref_lo - a, ref_hi + a, f"{ref} ± {fmt(a, dim, unit or ref_unit)}"


def _judged(claim: Claim, shown: str, inside: bool, shown_band: str) -> str:
    """'<value> is inside <shown_band>', or the threshold wording for at_least / at_most."""
    if "at_least" in claim.tolerance:
        return f"{shown} {'reaches' if inside else 'is below'} the threshold of {shown_band}"
    if "at_most" in claim.tolerance:
        return f"{shown} {'is within' if inside else 'exceeds'} the limit of {shown_band}"
    return f"{shown} is {'inside' if inside else 'outside'} {shown_band}"


def _inside(value: float, lo: float, hi: float) -> bool:
    return lo - 1e-12 <= value <= hi + 1e-12


def _caveat(*measured: Measured) -> str:
    """What a process-level memory reading cannot show, said wherever a verdict rests on one."""
    if any(m.memory_source.startswith("process") for m in measured):
        return ("; the reading is the process's resident memory, which includes the framework's own code and "
                "allocator caches, so differences the size of activations show less than on a GPU")
    return ""


def _operand_name(claim: Claim, op: Operand) -> str:
    """Only what differs between the two operands names one: 'PyTorch', '+pt_val_grad', 'evaluation memory peak'."""
    a, b = claim.operands["numerator"], claim.operands["denominator"]
    parts = [LABELS[op.framework] if a.framework != b.framework else "",
             op.variant if a.variant != b.variant else "",
             metrics.QUANTITIES[op.quantity].short if a.quantity != b.quantity else ""]
    return " ".join(p for p in parts if p)


def _ratio_text(claim: Claim, num: Measured, den: Measured) -> str:
    a, b = claim.operands["numerator"], claim.operands["denominator"]
    return (f"{_operand_name(claim, a)} {metrics.show(a.quantity, num.value)} / "
            f"{_operand_name(claim, b)} {metrics.show(b.quantity, den.value)}")


def _bracket(num: Measured, den: Measured) -> str:
    """The ratio's bracket over repeats, where both sides have repeats."""
    return stats.ratio(num.values, den.values).bracket()


def evaluate(claims: list[Claim], results: list[dict[str, Any]]) -> list[Verdict]:
    """One verdict per claim and (profile, device) the results cover; 'not measured' where none."""
    out = []
    for claim in claims:
        found = contexts(claim, results)
        if not found:
            out.append(_not_run(claim, results))
            continue
        for context in found:
            out.append(evaluate_in(claim, results, context))
    return out


def _not_run(claim: Claim, results: list[dict[str, Any]]) -> Verdict:
    """A claim whose experiment has no finished run here: not comparable where it is comparable on none of the
    (profile, device) pairs the results cover, as the plan leaves out such an experiment by default
    (reprokit/plan/claimed.py); else not measured."""
    here = sorted({(r["profile"], r["spec"].get("device", "cpu")) for r in results if r["status"] == "ok"})
    if not here or any(comparable_on(claim, *context) for context in here):
        return Verdict(claim, NOT_MEASURED, "no run", f"no finished run of {claim.experiment} in these results")
    profile, device = here[0]
    names = sorted({r["environment"]["device_name"] for r in results if r["status"] == "ok"
                    and (r["profile"], r["spec"].get("device", "cpu")) == here[0]})
    why = _incomparable(claim, here[0], names)
    return Verdict(claim, NOT_COMPARABLE, f"not run ({profile}, {device})",
                   f"{why}; so {claim.experiment} was not run here (--only {claim.experiment} runs it)",
                   profile=profile, device=device, indicative=profile == "quick")


def evaluate_in(claim: Claim, results: list[dict[str, Any]], context: tuple[str, str]) -> Verdict:
    profile, device = context
    base: dict[str, Any] = {"profile": profile, "device": device, "indicative": profile == "quick"}
    incomparable = _incomparable(claim, context, _device_names(results, claim, context))
    try:
        status, ours, why, ids, value = _KINDS[claim.kind](claim, results, context)
    except NotMeasured as exc:
        consulted = tuple(r["run_id"] for op in claim.operands.values()
                          for r in _select(results, claim.experiment, op, context))
        if exc.hardware or incomparable:
            return Verdict(claim, NOT_COMPARABLE, exc.short, incomparable or exc.reason, run_ids=consulted, **base)
        return Verdict(claim, NOT_MEASURED, exc.short, exc.reason, run_ids=consulted, **base)
    if incomparable:
        return Verdict(claim, NOT_COMPARABLE, f"{ours} ({profile}, {device})", incomparable,
                       run_ids=ids, value=value, **base)
    explained = _explained(claim, results, context) if status == REPRODUCED else None
    if explained:
        why += f"; {explained[1]}"
    return Verdict(claim, status, ours, why, run_ids=ids, value=value, explained_by=explained and explained[0],
                   **base)


def posted_gap(claim: Claim) -> tuple[str, str, str, str] | None:
    """(quantity, reading, numerator framework, denominator framework) of a claim on one framework's figure over
    another's as posted, whose gap from fixed the ablation decomposes; None for any other claim."""
    if claim.kind not in ("ratio", "effect_disappears_with_fix"):
        return None
    a, b = claim.operands["numerator"], claim.operands["denominator"]
    if a.variant != POSTED or b.variant != POSTED or a.framework == b.framework or a.quantity != b.quantity:
        return None
    return a.quantity, a.reading, a.framework, b.framework


def _explained(claim: Claim, results: list[dict[str, Any]], context: tuple[str, str]) -> tuple[str, str] | None:
    """The factor that explains a reproduced gap as posted, and the shares that say so (shares.RULE), or None."""
    gap = posted_gap(claim)
    if gap is None:
        return None
    profile, device = context
    mine = [r for r in results if r["profile"] == profile and r["spec"].get("device", "cpu") == device]
    by_variant = run_groups.group(mine).get(claim.experiment, {})
    found = shares.decompose(by_variant, claim.experiment, *gap)
    top = shares.explaining(found) if found else None
    if found is None or top is None:
        return None
    assert found.interaction is not None        # explaining() needs every factor's share
    return top.factor, (f"explained by {top.factor}: its share {top.share.text()} of the gap {found.gap.text()} "
                        f"from fixed to as posted is more than half of it (on the log scale) over its interval, and "
                        f"the interaction {found.interaction.text()} holds 1x")


def _value(claim: Claim, results: list[dict[str, Any]], context: tuple[str, str]) -> Judged:
    op = claim.operands["value"]
    m = measure(results, claim.experiment, op, context)
    lo, hi, accepted = band(claim)
    unit = claim.tolerance.get("unit") or _reference_unit(claim)
    shown = _fmt_metric(claim, m.value, unit)
    ours = metrics.show(op.quantity, m.value) if op.quantity != "memory_growth" else m.detail
    inside = _inside(m.value, lo, hi)
    why = _judged(claim, shown, inside, accepted)
    if op.quantity == "memory_growth":
        why = f"memory {'grows' if inside else 'does not grow that much'} over the measured steps: {why}"
    elif m.detail:
        why += f" ({m.detail})"
    why += _caveat(m)
    return (REPRODUCED if inside else NOT_REPRODUCED), ours, why, m.run_ids, m.value


def _wrong_way(claim: Claim, value: float) -> bool:
    return (claim.direction == "greater" and value <= 1) or (claim.direction == "less" and value >= 1)


def _ratio(claim: Claim, results: list[dict[str, Any]], context: tuple[str, str]) -> Judged:
    num = measure(results, claim.experiment, claim.operands["numerator"], context)
    den = measure(results, claim.experiment, claim.operands["denominator"], context)
    if not den.value:
        raise NotMeasured("the denominator measured zero")
    value = num.value / den.value
    lo, hi, accepted = band(claim)
    inside = _inside(value, lo, hi)
    ours = f"{value:.2f}x{_bracket(num, den)} ({_ratio_text(claim, num, den)})"
    source = next((m.detail for m in (num, den) if m.detail), "")
    why = _judged(claim, f"{value:.2f}x", inside, accepted) + (f" ({source})" if source else "")
    if claim.direction and _wrong_way(claim, value):
        inside = False
        why = (f"{value:.2f}x points the other way: the post has the ratio {claim.direction} than 1. " + why)
    return (REPRODUCED if inside else NOT_REPRODUCED), ours, why + _caveat(num, den), \
        num.run_ids + den.run_ids, value


def _accuracy_vs_chance(claim: Claim, results: list[dict[str, Any]], context: tuple[str, str]) -> Judged:
    op = claim.operands["value"]
    m = measure(results, claim.experiment, op, context)
    runs = _select(results, claim.experiment, op, context)
    chance = 1.0 / run_groups.classes(runs[0]["spec"])
    margin = claim.tolerance["absolute"]
    learned = m.value > chance + margin
    ours = f"{m.value:.3f} (chance {chance:.3f})"
    where = f"{m.value - chance:+.3f} from chance {chance:.3f} (learning = more than {margin:g} above it)"
    said = ("it learned" if learned else
            "it did not learn, and scored below chance" if m.value < chance - margin else "it did not learn")
    ok = (not learned) if claim.expect == "at_chance" else learned
    why = f"{said}: {where}" + (f"; {m.detail}" if m.detail else "")
    return (REPRODUCED if ok else NOT_REPRODUCED), ours, why, m.run_ids, m.value


def _effect(claim: Claim, results: list[dict[str, Any]], context: tuple[str, str]) -> Judged:
    a, b = claim.operands["numerator"], claim.operands["denominator"]
    fixed_a = Operand(a.quantity, a.framework, claim.fixed_variant, a.reading)
    fixed_b = Operand(b.quantity, b.framework, claim.fixed_variant, b.reading)
    posted = [measure(results, claim.experiment, o, context) for o in (a, b)]
    fixed = [measure(results, claim.experiment, o, context) for o in (fixed_a, fixed_b)]
    if not posted[1].value or not fixed[1].value:
        raise NotMeasured("a denominator measured zero")
    r_posted, r_fixed = posted[0].value / posted[1].value, fixed[0].value / fixed[1].value
    lo, hi, accepted = band(claim)
    side = "above" if claim.direction == "greater" else "below"
    present = r_posted > hi + 1e-12 if claim.direction == "greater" else r_posted < lo - 1e-12
    gone = _inside(r_fixed, lo, hi)
    ours = f"{r_posted:.2f}x {a.variant}, {r_fixed:.2f}x {claim.fixed_variant}"
    if present and gone:
        why = (f"{a.variant} {r_posted:.2f}x is {side} the similar band {accepted}, as posted; {claim.fixed_variant} "
               f"{r_fixed:.2f}x is inside it: the gap comes from what the fix removes")
    elif _inside(r_posted, lo, hi):
        why = f"{a.variant} {r_posted:.2f}x is already inside the similar band {accepted}: no gap to remove here"
    elif not present:
        why = (f"{a.variant} {r_posted:.2f}x is outside the similar band {accepted} but on the other side: the post's "
               f"gap is {side} it, so this is not the published effect")
    else:
        why = (f"{claim.fixed_variant} {r_fixed:.2f}x stays outside the similar band {accepted}: the fix does not "
               f"close the gap here ({a.variant} {r_posted:.2f}x)")
    what = f"{LABELS[a.framework]} / {LABELS[b.framework]}, {metrics.QUANTITIES[a.quantity].short}: "
    ids = tuple(i for m in (*posted, *fixed) for i in m.run_ids)
    return (REPRODUCED if present and gone else NOT_REPRODUCED), ours, what + why, ids, r_posted


_KINDS = {"value": _value, "ratio": _ratio, "accuracy_vs_chance": _accuracy_vs_chance,
          "effect_disappears_with_fix": _effect}


def learned(acc: float | None, num_classes: int) -> str:
    """The summary's wording: "learned" (more than LEARNED_MARGIN above chance), "at chance", "below chance"."""
    if acc is None:
        return "n/a"
    chance = 1.0 / num_classes
    if acc > chance + LEARNED_MARGIN:
        return "learned"
    return "below chance" if acc < chance - LEARNED_MARGIN else "at chance"

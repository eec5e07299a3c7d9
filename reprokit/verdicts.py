"""One small evaluator for every claim: measured figures from result files, a verdict, and why.

Nothing here knows a seed. A claim names a metric kind, its operands (quantity, framework,
variant, memory reading) and a tolerance; this module computes the operands from the result
files, compares, and words the verdict from the numbers. Verdicts:

- ``reproduced`` / ``not reproduced``: the measured metric is inside / outside the tolerance.
- ``not comparable``: the quantity cannot be measured on the profile or hardware used (an
  absolute GPU time on a CPU, a published GPU that no run matches); the reason says which.
- ``not measured`` is not a verdict: the runs the claim needs are not in these results.

Every verdict on the ``quick`` profile is marked indicative.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from reprokit.claims import QUANTITIES, UNITS, Claim, Operand, interval, reference

REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE, NOT_MEASURED = (
    "reproduced", "not reproduced", "not comparable", "not measured")
LABEL = {"pytorch": "PyTorch", "tensorflow": "TensorFlow"}
READING_NAMES = ("reported", "allocated", "reserved", "device")
LEARNED_MARGIN = 0.05       # above chance by more than this counts as learning in the summary


class Unavailable(Exception):
    """A quantity a result does not have. ``hardware``: it cannot exist on this device at all."""

    def __init__(self, reason: str, hardware: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.hardware = hardware


# --- quantities from one result ----------------------------------------------------------------

def _epochs(r: dict) -> list[dict]:
    epochs = r["timing"]["epochs"]
    if not epochs:
        raise Unavailable("no finished epoch")
    return epochs


def accuracy(r: dict, split: str = "test") -> tuple[float, str]:
    """Final accuracy per sample, and a note when the run reported it per batch (as the post did)."""
    last = r["metrics"]["epochs"][-1] if r["metrics"]["epochs"] else {}
    acc = last.get(f"{split}_accuracy")
    if acc is None:
        raise Unavailable(f"no final {split} accuracy recorded")
    if r["metrics"].get("averaged_over") != "batches":
        return acc, ""
    if split == "train":
        steps, samples = r["effective"]["train_steps_per_epoch"][-1], r["effective"]["train_samples_per_epoch"][-1]
    else:
        samples = r["effective"]["test_samples"]
        steps = math.ceil(samples / r["spec"]["train"]["eval_batch_size"])
    return acc * steps / samples, (f"per sample from the run's {acc:.4g} correct per batch (computed as the post "
                                   f"did) x {steps} batches / {samples} samples")


def memory_readings(r: dict) -> dict[str, tuple[int, str]]:
    """Every peak-memory reading a result has: name -> (bytes, what it is)."""
    mem = r["memory"]
    out: dict[str, tuple[int, str]] = {}
    if mem.get("peak_bytes") is not None:
        out["reported"] = (mem["peak_bytes"], mem["source"])
    fw = mem.get("framework") or {}
    if fw.get("peak_allocated") is not None:
        out["allocated"] = (fw["peak_allocated"], "the framework allocator's peak allocated")
    if fw.get("peak_reserved") is not None:
        out["reserved"] = (fw["peak_reserved"], "the framework allocator's peak reserved")
    device = fw.get("device_peak_bytes", mem.get("device_peak_bytes"))
    if device is not None:
        out["device"] = (device, fw.get("device_source") or "device-level peak (NVML)")
    return out


def memory_growth(r: dict) -> tuple[float, float, tuple[int, int]]:
    """(slope in bytes per step, growth over the fitted steps relative to the level at their start, steps).

    A least-squares line through the sampled memory, leaving out the first quarter of the samples
    (allocator and graph warm-up)."""
    pts = sorted(tuple(p) for p in r["memory"]["over_steps"])
    if len(pts) < 4:
        raise Unavailable(f"only {len(pts)} memory samples over steps; a trend needs 4 or more")
    pts = pts[len(pts) // 4:]
    xs = np.array([p[0] for p in pts], dtype=float)
    ys = np.array([p[1] for p in pts], dtype=float)
    slope, intercept = np.polyfit(xs, ys, 1)
    start = intercept + slope * xs[0]
    span = xs[-1] - xs[0]
    return float(slope), float(slope * span / start) if start > 0 else 0.0, (int(xs[0]), int(xs[-1]))


def quantity(r: dict, name: str, reading: str = "reported") -> float:
    """One quantity of one result, in its dimension's base unit (s, bytes, samples, fraction ...)."""
    t, eff, mem = r.get("timing"), r.get("effective"), r.get("memory")
    if name == "samples_per_s":
        return t["samples_per_s"]
    if name in ("steps_per_s", "step_time_s"):
        steps, train_s = sum(eff["train_steps_per_epoch"]), sum(e["train_s"] for e in _epochs(r))
        if not steps or not train_s:
            raise Unavailable("no training step timed")
        return steps / train_s if name == "steps_per_s" else train_s / steps
    if name == "step_time_p50_s":
        if t["step_s"]["p50"] is None:
            raise Unavailable("no step time after warmup")
        return t["step_s"]["p50"]
    if name == "train_time_per_epoch_s":
        return statistics.mean(e["train_s"] for e in _epochs(r))
    if name == "eval_time_per_epoch_s":
        return statistics.mean(e["eval_s"] for e in _epochs(r))
    if name == "epoch_time_s":
        return statistics.mean(e["train_s"] + e["eval_s"] for e in _epochs(r))
    if name == "total_time_s":
        return sum(e["train_s"] + e["eval_s"] for e in _epochs(r))
    if name == "effective_batch_size":
        return eff["batch_size"]["mean"]
    if name == "train_samples_per_epoch":
        return statistics.mean(eff["train_samples_per_epoch"])
    if name in ("final_test_accuracy", "final_train_accuracy"):
        return accuracy(r, name.split("_")[1])[0]
    if name == "peak_memory_bytes":
        readings = memory_readings(r)
        if reading not in readings:
            on_gpu = r["spec"].get("device") == "gpu"
            why = {"allocated": "an allocator reading exists only on a GPU",
                   "reserved": "a reserved-memory reading exists only for PyTorch's caching allocator on a GPU",
                   "device": "a device-level (NVML) reading exists only on a GPU",
                   }.get(reading, "no peak memory recorded")
            if on_gpu:
                why = f"this result records no {reading!r} reading ({why})"
                if reading == "device" and (mem.get("framework") or {}).get("device_source"):
                    why = f"this result records no device reading: {mem['framework']['device_source']}"
            raise Unavailable(why, hardware=not on_gpu)
        return readings[reading][0]
    if name in ("train_peak_memory_bytes", "eval_peak_memory_bytes"):
        key = name.replace("_memory", "")
        if mem.get(key) is None:
            raise Unavailable(f"this result records no memory.{key} (a kit older than that field)")
        return mem[key]
    if name == "memory_growth":
        return memory_growth(r)[1]
    if name == "memory_growth_bytes_per_step":
        return memory_growth(r)[0]
    raise ValueError(f"unknown quantity {name!r}")     # the schema keeps this unreachable


# --- formatting ---------------------------------------------------------------------------------

def _sig(x: float) -> str:
    """Three significant figures, thousands separated, no trailing zeros."""
    if not math.isfinite(x):
        return str(x)
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def fmt(value: float, dimension: str, unit: str | None = None) -> str:
    """A base-unit value for people: in ``unit`` when given, else a unit chosen by magnitude."""
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "∞"
    if unit and unit != "qualitative":
        return f"{_sig(value / UNITS[unit][1])} {unit}".replace(" x", "x")
    if dimension == "time":
        if abs(value) < 1:
            return f"{value * 1e3:.1f} ms"
        if abs(value) < 120:
            return f"{value:.1f} s"
        return f"{int(value // 60)}m {value % 60:02.0f}s"
    if dimension == "bytes":
        return f"{value / 2**30:.2f} GiB" if abs(value) >= 2**30 else f"{value / 2**20:,.0f} MiB"
    if dimension == "bytes_per_step":
        return f"{value / 2**10:+,.1f} KiB/step"
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
    return _sig(value)


SHORT = {
    "samples_per_s": "throughput", "steps_per_s": "step rate", "step_time_s": "time per step",
    "step_time_p50_s": "median step time", "train_time_per_epoch_s": "training time per epoch",
    "eval_time_per_epoch_s": "evaluation time per epoch", "epoch_time_s": "time per epoch (train + eval)",
    "total_time_s": "total time (train + eval)", "effective_batch_size": "samples per step",
    "train_samples_per_epoch": "samples per epoch", "final_test_accuracy": "final test accuracy",
    "final_train_accuracy": "final train accuracy", "peak_memory_bytes": "peak memory",
    "train_peak_memory_bytes": "training memory peak", "eval_peak_memory_bytes": "evaluation memory peak",
    "memory_growth": "memory growth over steps", "memory_growth_bytes_per_step": "memory slope",
}


def fmt_quantity(name: str, value: float) -> str:
    if name == "memory_growth":
        return f"{value:+.1%}"
    return fmt(value, QUANTITIES[name][0])


def fmt_figure(fig: dict) -> str:
    """A published figure as posted, with its unit and, where it differs, its base-unit value."""
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


# --- measuring operands over runs ---------------------------------------------------------------

@dataclass
class Measured:
    value: float
    run_ids: tuple[str, ...]
    detail: str = ""
    readings: dict[str, tuple[float, str]] = field(default_factory=dict)
    memory_source: str = ""


MEMORY_QUANTITIES = ("peak_memory_bytes", "train_peak_memory_bytes", "eval_peak_memory_bytes", "memory_growth",
                     "memory_growth_bytes_per_step")


def _caveat(*measured: "Measured") -> str:
    """What a process-level memory reading cannot show, said wherever a verdict rests on one."""
    if any(m.memory_source.startswith("process") for m in measured):
        return ("; the reading is the process's resident memory, which includes the framework's own code and "
                "allocator caches, so differences the size of activations show less than on a GPU")
    return ""


def _select(results: list[dict], experiment: str, op: Operand, context: tuple[str, str]) -> list[dict]:
    """The finished runs of an operand. The planner runs identical pitfall sets once, under the first
    name (a variant whose only pitfall of this framework is p is also "+p"), so "+p" and "fixed" also
    match a run of another name with exactly those pitfalls."""
    profile, device = context
    same = [r for r in results if r["status"] == "ok" and r["experiment"] == experiment
            and r["framework"] == op.framework and r["profile"] == profile and r["spec"].get("device") == device]
    named = [r for r in same if r["variant"] == op.variant]
    if named or not (op.variant == "fixed" or op.variant.startswith("+")):
        return named
    wanted = [] if op.variant == "fixed" else [op.variant[1:]]
    return [r for r in same if r["spec"].get("pitfalls") == wanted]


def measure(results: list[dict], experiment: str, op: Operand, context: tuple[str, str]) -> Measured:
    runs = _select(results, experiment, op, context)
    if not runs:
        raise Unavailable(f"no finished run of {LABEL[op.framework]} / {op.variant} "
                          f"on the {context[0]} profile ({context[1]}) in these results")
    ids = tuple(r["run_id"] for r in runs)
    if op.quantity == "peak_memory_bytes" and op.reading == "any":
        per: dict[str, list[float]] = {}
        what: dict[str, str] = {}
        for r in runs:
            for name, (b, source) in memory_readings(r).items():
                per.setdefault(name, []).append(b)
                what[name] = source
        if not per:
            raise Unavailable("no memory reading recorded")
        readings = {n: (statistics.median(v), what[n]) for n, v in per.items()}
        return Measured(max(v for v, _ in readings.values()), ids, readings=readings,
                        memory_source=runs[0]["memory"]["source"])
    values = [quantity(r, op.quantity, op.reading) for r in runs]
    detail = ""
    if op.quantity in ("memory_growth", "memory_growth_bytes_per_step"):
        fits = [memory_growth(r) for r in runs]
        slope, rel = statistics.median(f[0] for f in fits), statistics.median(f[1] for f in fits)
        a, b = fits[0][2]
        detail = (f"{rel:+.1%} over steps {a}–{b} ({slope / 2**10:+,.1f} KiB/step)" +
                  (f", median of {len(runs)} runs" if len(runs) > 1 else ""))
    elif op.quantity in ("final_test_accuracy", "final_train_accuracy"):
        detail = accuracy(runs[0], op.quantity.split("_")[1])[1]
    elif op.quantity == "peak_memory_bytes":
        detail = memory_readings(runs[0])[op.reading][1]
    source = runs[0]["memory"]["source"] if op.quantity in MEMORY_QUANTITIES else ""
    return Measured(statistics.median(values), ids, detail=detail, memory_source=source)


# --- verdicts -----------------------------------------------------------------------------------

@dataclass
class Verdict:
    claim: Claim
    status: str
    ours: str
    why: str
    profile: str | None = None
    device: str | None = None
    indicative: bool = False
    run_ids: tuple[str, ...] = ()
    value: float | None = None          # the measured metric, in base units, where one was computed

    @property
    def label(self) -> str:
        return self.status + (" (indicative)" if self.indicative and self.status in (REPRODUCED, NOT_REPRODUCED)
                               else "")


def contexts(claim: Claim, results: list[dict]) -> list[tuple[str, str]]:
    """The (profile, device) pairs the results cover for the claim's experiment."""
    order = {"quick": 0, "standard": 1, "full": 2}
    found = {(r["profile"], r["spec"].get("device", "cpu")) for r in results
             if r["status"] == "ok" and r["experiment"] == claim.experiment}
    return sorted(found, key=lambda c: (order.get(c[0], 9), c[1]))


def _device_names(results: list[dict], claim: Claim, context: tuple[str, str]) -> list[str]:
    return sorted({r["environment"]["device_name"] for op in claim.operands.values()
                   for r in _select(results, claim.experiment, op, context)})


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


def _band(claim: Claim) -> tuple[float, float, str]:
    """The accepted interval of the metric (base units) and how to say it."""
    dim = claim.dimension
    t = claim.tolerance
    bounds = claim.bounds()
    unit = t.get("unit")
    if bounds is not None:
        lo, hi = bounds
        if "range" in t:
            text = f"{_fmt_metric(claim, lo, unit)}–{_fmt_metric(claim, hi, unit)}"
        elif "at_least" in t:
            text = _fmt_metric(claim, lo, unit)
        else:
            text = _fmt_metric(claim, hi, unit)
        return lo, hi, text
    ref_lo, ref_hi = reference(claim)
    ref_unit = _reference_unit(claim)
    if "relative" in t:
        r = t["relative"]
        lo, hi = ref_lo * (1 - r), ref_hi * (1 + r)
        return lo, hi, f"±{r:.0%} of {_fmt_ref(ref_lo, ref_hi, dim, ref_unit)}: {fmt(lo, dim, ref_unit)}–{fmt(hi, dim, ref_unit)}"
    a = t["absolute"] * (UNITS[unit][1] if unit else 1.0)
    lo, hi = ref_lo - a, ref_hi + a
    return lo, hi, f"{_fmt_ref(ref_lo, ref_hi, dim, ref_unit)} ± {fmt(a, dim, unit or ref_unit)}"


def _judged(claim: Claim, shown: str, inside: bool, band: str) -> str:
    """'<value> is inside <band>', or the threshold wording for at_least / at_most."""
    if "at_least" in claim.tolerance:
        return f"{shown} {'reaches' if inside else 'is below'} the threshold of {band}"
    if "at_most" in claim.tolerance:
        return f"{shown} {'is within' if inside else 'exceeds'} the limit of {band}"
    return f"{shown} is {'inside' if inside else 'outside'} {band}"


def _reference_unit(claim: Claim) -> str | None:
    if claim.kind != "value":
        return None
    figs = claim.figures_for(claim.operands["value"])
    return figs[0]["unit"] if len(figs) == 1 else None


def _fmt_ref(lo: float, hi: float, dim: str, unit: str | None) -> str:
    return fmt(lo, dim, unit) if lo == hi else f"{fmt(lo, dim, unit)}–{fmt(hi, dim, unit)}"


def _inside(value: float, lo: float, hi: float) -> bool:
    return lo - 1e-12 <= value <= hi + 1e-12


def _describe_operands(claim: Claim, num: Measured, den: Measured) -> str:
    """'PyTorch 816 MiB / TensorFlow 671 MiB, peak memory': only what differs names an operand."""
    a, b = claim.operands["numerator"], claim.operands["denominator"]

    def name(op: Operand) -> str:
        parts = []
        if a.framework != b.framework:
            parts.append(LABEL[op.framework])
        if a.variant != b.variant:
            parts.append(op.variant)
        if a.quantity != b.quantity:
            parts.append(SHORT[op.quantity])
        return " ".join(parts)
    text = f"{name(a)} {fmt_quantity(a.quantity, num.value)} / {name(b)} {fmt_quantity(b.quantity, den.value)}"
    if a.quantity == b.quantity:
        text += f", {SHORT[a.quantity]}"
    if a.framework == b.framework:
        text += f", {LABEL[a.framework]}"
    if a.variant == b.variant:
        text += f", {a.variant}"
    source = num.detail if a.quantity == "peak_memory_bytes" else ""
    return text + (f" ({source})" if source else "")


def evaluate(claims: list[Claim], results: list[dict]) -> list[Verdict]:
    """One verdict per claim and (profile, device) the results cover; 'not measured' where none."""
    out = []
    for claim in claims:
        found = contexts(claim, results)
        if not found:
            out.append(Verdict(claim, NOT_MEASURED, "n/a",
                               f"no finished run of {claim.experiment} in these results"))
            continue
        for context in found:
            out.append(_evaluate_one(claim, results, context))
    return out


def _evaluate_one(claim: Claim, results: list[dict], context: tuple[str, str]) -> Verdict:
    profile, device = context
    base = {"profile": profile, "device": device, "indicative": profile == "quick"}
    incomparable = _incomparable(claim, context, _device_names(results, claim, context))
    try:
        status, ours, why, ids, value = _KINDS[claim.kind](claim, results, context)
    except Unavailable as exc:
        if exc.hardware or incomparable:
            return Verdict(claim, NOT_COMPARABLE, "n/a", incomparable or exc.reason, **base)
        return Verdict(claim, NOT_MEASURED, "n/a", exc.reason, **base)
    if incomparable:
        return Verdict(claim, NOT_COMPARABLE, f"{ours} (on {profile}, {device}; not the published setting)",
                       incomparable, run_ids=ids, value=value, **base)
    return Verdict(claim, status, ours, why, run_ids=ids, value=value, **base)


def _value(claim: Claim, results, context):
    op = claim.operands["value"]
    m = measure(results, claim.experiment, op, context)
    lo, hi, band = _band(claim)
    dim = QUANTITIES[op.quantity][0]
    unit = _reference_unit(claim) if "unit" not in claim.tolerance else claim.tolerance["unit"]
    if m.readings:
        shown = "; ".join(f"{n} {fmt(v, dim, unit)}" for n, (v, _) in sorted(m.readings.items(),
                                                                        key=lambda kv: READING_NAMES.index(kv[0])))
        ours = f"{shown} ({LABEL[op.framework]}, {op.variant})"
        hits = [n for n, (v, _) in m.readings.items() if _inside(v, lo, hi)]
        missing = [n for n in READING_NAMES if n not in m.readings]
        gone = f" Not recorded: {', '.join(missing)}." if missing else ""
        sources = "; ".join(f"{n} = {what}" for n, (_, what) in m.readings.items())
        if hits:
            return (REPRODUCED, ours, f"within {band} by the {', '.join(hits)} reading(s), so the post may have "
                                      f"read it that way ({sources}).{gone}", m.run_ids, m.value)
        ref = reference(claim)
        target = math.sqrt(ref[0] * ref[1]) if ref and math.isfinite(ref[1]) else (lo if math.isfinite(lo) else hi)
        near = min(m.readings.items(), key=lambda kv: abs(math.log(max(kv[1][0], 1) / target)))
        ratio = near[1][0] / target
        return (NOT_REPRODUCED, ours, f"no reading within {band}; the nearest, {near[0]}, is "
                                      f"{ratio:.2f}x the published figure ({sources}).{gone}", m.run_ids, m.value)
    if op.quantity in ("memory_growth", "memory_growth_bytes_per_step") and m.detail:
        ours = m.detail
    else:
        ours = fmt_quantity(op.quantity, m.value) + (f" ({m.detail})" if m.detail else "")
    inside = _inside(m.value, lo, hi)
    why = _judged(claim, _fmt_metric(claim, m.value, unit), inside, band)
    if op.quantity == "memory_growth":
        why = f"memory {'grows' if inside else 'does not grow that much'} over the measured steps: {why}"
    why += _caveat(m)
    return (REPRODUCED if inside else NOT_REPRODUCED), ours, why, m.run_ids, m.value


def _ratio(claim: Claim, results, context):
    num = measure(results, claim.experiment, claim.operands["numerator"], context)
    den = measure(results, claim.experiment, claim.operands["denominator"], context)
    if not den.value:
        raise Unavailable("the denominator measured zero")
    value = num.value / den.value
    lo, hi, band = _band(claim)
    inside = _inside(value, lo, hi)
    ours = f"{value:.2f}x: {_describe_operands(claim, num, den)}"
    why = _judged(claim, f"{value:.2f}x", inside, band) + _caveat(num, den)
    return (REPRODUCED if inside else NOT_REPRODUCED), ours, why, num.run_ids + den.run_ids, value


def _accuracy_vs_chance(claim: Claim, results, context):
    op = claim.operands["value"]
    m = measure(results, claim.experiment, op, context)
    runs = _select(results, claim.experiment, op, context)
    chance = 1.0 / runs[0]["spec"]["model"]["num_classes"]
    margin = claim.tolerance["absolute"]
    learned = m.value > chance + margin
    ours = f"{m.value:.3f} (chance {chance:.3f})" + (f"; {m.detail}" if m.detail else "")
    where = f"{m.value - chance:+.3f} from chance {chance:.3f} (learning = more than {margin:g} above it)"
    said = ("it learned" if learned else
            "it did not learn, and scored below chance" if m.value < chance - margin else "it did not learn")
    ok = (not learned) if claim.expect == "at_chance" else learned
    return (REPRODUCED if ok else NOT_REPRODUCED), ours, f"{said}: {where}", m.run_ids, m.value


def _effect(claim: Claim, results, context):
    a, b = claim.operands["numerator"], claim.operands["denominator"]
    fixed_a = Operand(a.quantity, a.framework, claim.fixed_variant, a.reading)
    fixed_b = Operand(b.quantity, b.framework, claim.fixed_variant, b.reading)
    posted = [measure(results, claim.experiment, o, context) for o in (a, b)]
    fixed = [measure(results, claim.experiment, o, context) for o in (fixed_a, fixed_b)]
    if not posted[1].value or not fixed[1].value:
        raise Unavailable("a denominator measured zero")
    r_posted, r_fixed = posted[0].value / posted[1].value, fixed[0].value / fixed[1].value
    lo, hi, band = _band(claim)
    present, gone = not _inside(r_posted, lo, hi), _inside(r_fixed, lo, hi)
    ours = (f"{LABEL[a.framework]} / {LABEL[b.framework]}, {SHORT[a.quantity]}: {r_posted:.2f}x {a.variant}, "
            f"{r_fixed:.2f}x {claim.fixed_variant}")
    if present and gone:
        why = f"{a.variant} {r_posted:.2f}x is outside the similar band {band}; {claim.fixed_variant} " \
              f"{r_fixed:.2f}x is inside it: the gap comes from what the fix removes"
    elif not present:
        why = f"{a.variant} {r_posted:.2f}x is already inside the similar band {band}: no gap to remove here"
    else:
        why = f"{claim.fixed_variant} {r_fixed:.2f}x stays outside the similar band {band}: the fix does not " \
              f"close the gap here ({a.variant} {r_posted:.2f}x)"
    ids = tuple(i for m in (*posted, *fixed) for i in m.run_ids)
    return (REPRODUCED if present and gone else NOT_REPRODUCED), ours, why, ids, r_posted


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


__all__ = ["Verdict", "evaluate", "quantity", "accuracy", "memory_readings", "memory_growth", "fmt",
           "fmt_quantity", "fmt_figure", "interval", "REPRODUCED", "NOT_REPRODUCED", "NOT_COMPARABLE",
           "NOT_MEASURED", "Unavailable", "learned"]

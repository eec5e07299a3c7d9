"""Published claims as data: what a seed post said, what of it transfers, and how it is checked.

A claims file (``claims/<name>.toml``, schema ``reprokit/schemas/claims.schema.json``) lists
claims. Each one names its experiment, its source in the seed post, the published words and
figures (each with a unit), a metric from a small generic vocabulary, a tolerance, and where it
is comparable at all. ``reprokit.claims.verdicts`` is the one evaluator; nothing here is specific
to a seed. A bad file is refused with one sentence naming the file, the claim, the key and what
is allowed, before anything runs.

Each claim names in advance the one reading that judges it: a peak-memory operand states its
``reading`` (reported, allocated, reserved or device), and a claim that an effect points one way
states its ``direction`` (the measured ratio ``greater`` or ``less`` than 1; for an effect that
disappears with the fix, above or below the similar band), so an effect the wrong way round is
never counted as reproduced.

Metric kinds:

- ``value``: one quantity of one framework and variant, against a published figure.
- ``ratio``: a quantity of ``numerator`` over one of ``denominator`` (between frameworks,
  between variants, or between two quantities of one run).
- ``accuracy_vs_chance``: final accuracy against 1/num_classes; ``expect`` at or above chance.
- ``effect_disappears_with_fix``: a ratio outside the ``range`` band as posted and inside it
  once fixed.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.claims.claims_schema import FRAMEWORK_SCHEMAS, SCHEMA, framework_schema_text, schema_text, validated
from reprokit.errors import UserError
from reprokit.kits.contract.pitfalls import PITFALLS
from reprokit.results import metrics
from reprokit.results.runs import TUNED, TUNED_ALONE, TUNED_SETTINGS
from reprokit.results.units import NON_NEGATIVE, UNITS

SCHEMA_ID = "reprokit.claims/1"
# The claims schema's quantity enum is written from metrics, and every schema's framework enum from
# reprokit/kits/contract/names.py BUILTIN, by this command (tests/test_quantities.py and tests/test_registry.py fail
# until it is run).
REGENERATE = 'python -c "from reprokit.claims import claims; claims.write_schema()"'

# quantity -> (dimension, what it is): every quantity metrics reads
QUANTITIES: dict[str, tuple[str, str]] = {name: (q.dimension, q.what) for name, q in metrics.QUANTITIES.items()}
ACCURACIES = ("final_test_accuracy", "final_train_accuracy")
READINGS = metrics.READINGS
# The quantities that have several readings (the memory peaks): a claim on one names the reading that judges it.
MEMORY_PEAKS = tuple(name for name, q in metrics.QUANTITIES.items() if len(q.readings) > 1)
KINDS = ("value", "ratio", "accuracy_vs_chance", "effect_disappears_with_fix")
BOUNDS = ("range", "at_least", "at_most")
AROUND = ("relative", "absolute")
FIGURE_FORMS = ("value", "range", "at_least", "at_most", "text")
DIRECTIONS = ("greater", "less")
# What a check raises: the UserError made from the key at fault and the problem (_build names file and claim).
Bad = Callable[[str, str], UserError]


@dataclass(frozen=True)
class Operand:
    quantity: str
    framework: str
    variant: str
    reading: str = "reported"

    def label(self) -> str:
        return f"{self.framework}/{self.variant}"


@dataclass(frozen=True)
class Claim:
    id: str
    experiment: str
    role: str                       # "figure" (a published number) or "explanation" (a posted cause)
    title: str
    source: dict[str, Any]          # {"seed": ..., "where": ...}
    statement: str                  # the published words
    published: tuple[dict[str, Any], ...]   # figures, each with a unit
    kind: str
    operands: dict[str, Operand]    # "value" for value/accuracy kinds; "numerator"/"denominator" otherwise
    tolerance: dict[str, Any]
    transfers: str
    comparable: dict[str, Any] = field(default_factory=dict)
    expect: str | None = None
    fixed_variant: str = "fixed"
    direction: str | None = None    # "greater" / "less": the way the published effect points
    note: str = ""
    file: str = ""

    def variants(self) -> set[str]:
        out = {o.variant for o in self.operands.values()}
        if self.kind == "effect_disappears_with_fix":
            out.add(self.fixed_variant)
        return out

    def frameworks(self) -> set[str]:
        return {o.framework for o in self.operands.values()}

    @property
    def dimension(self) -> str:
        """The dimension of the metric: a ratio's is "ratio", otherwise its quantity's."""
        if self.kind in ("ratio", "effect_disappears_with_fix"):
            return "ratio"
        return QUANTITIES[self.operands["value"].quantity][0]

    def bounds(self) -> tuple[float, float] | None:
        """A bounds tolerance in the metric's base unit: (low, high), either may be infinite."""
        t = self.tolerance
        factor = UNITS[t["unit"]][1] if "unit" in t else 1.0
        if "range" in t:
            return t["range"][0] * factor, t["range"][1] * factor
        if "at_least" in t:
            return t["at_least"] * factor, math.inf
        if "at_most" in t:
            return -math.inf, t["at_most"] * factor
        return None

    def figures_for(self, operand: Operand) -> list[dict[str, Any]]:
        """Numeric published figures that state this operand (each key a figure sets must match)."""
        return [f for f in self.published if "text" not in f and _matches(f, operand)]

    def ratio_figure(self) -> dict[str, Any] | None:
        ratios = [f for f in self.published if f["unit"] == "x" and "text" not in f]
        return ratios[0] if len(ratios) == 1 else None


def _matches(figure: dict[str, Any], operand: Operand) -> bool:
    return all(figure.get(k) in (None, getattr(operand, k)) for k in ("framework", "variant", "quantity"))


def interval(figure: dict[str, Any]) -> tuple[float, float]:
    """A numeric figure as an interval in its dimension's base unit."""
    factor = UNITS[figure["unit"]][1]
    if "value" in figure:
        return figure["value"] * factor, figure["value"] * factor
    if "range" in figure:
        return figure["range"][0] * factor, figure["range"][1] * factor
    if "at_least" in figure:
        return figure["at_least"] * factor, math.inf
    return 0.0, figure["at_most"] * factor


def write_schema() -> None:
    """Write the committed schemas' generated parts, as claims_schema computes them (REGENERATE runs it)."""
    SCHEMA.write_text(schema_text(SCHEMA.read_text()))
    for path in FRAMEWORK_SCHEMAS:
        path.write_text(framework_schema_text(path.read_text()))


# --- loading ---------------------------------------------------------------------------------

def load(name_or_path: str | Path) -> list[Claim]:
    """Read, validate and resolve one claims file; any problem is a UserError naming file, claim and key."""
    path, doc = validated(name_or_path)
    claims, seen = [], set()
    for raw in doc["claim"]:
        if raw["id"] in seen:
            raise UserError(f"{path}: claim {raw['id']!r}: id: defined twice; every claim id must be unique")
        seen.add(raw["id"])
        claims.append(_build(path, raw))
    return claims


def _build(path: Path, raw: dict[str, Any]) -> Claim:
    def bad(key: str, problem: str) -> UserError:
        return UserError(f"{path}: claim {raw['id']!r}: {key}: {problem}")

    metric = raw["metric"]
    kind = metric["kind"]
    operands = _operands(metric, bad)
    _check_metric(metric, operands, bad)
    claim = Claim(
        id=raw["id"], experiment=raw["experiment"], role=raw["role"], title=raw["title"],
        source=raw["source"], statement=raw["statement"], published=tuple(raw["published"]), kind=kind,
        operands=operands, tolerance=raw["tolerance"], transfers=raw["transfers"],
        comparable=raw.get("comparable", {}), expect=metric.get("expect"),
        fixed_variant=metric.get("fixed_variant", "fixed"), direction=metric.get("direction"),
        note=raw.get("note", ""), file=str(path))
    for i, fig in enumerate(claim.published):
        _check_figure(fig, f"published[{i}]", bad)
    _check_tolerance(claim, bad)
    return claim


def _operands(metric: dict[str, Any], bad: Bad) -> dict[str, Operand]:
    """"value", or "numerator" and "denominator": each a quantity of one framework and variant."""
    kind = metric["kind"]
    base: dict[str, Any] = {k: metric[k] for k in ("quantity", "framework", "variant", "reading") if k in metric}
    if kind == "accuracy_vs_chance":
        base.setdefault("quantity", "final_test_accuracy")
    if kind in ("value", "accuracy_vs_chance"):
        for k in ("numerator", "denominator", "fixed_variant"):
            if k in metric:
                raise bad(f"metric.{k}", f"not used by a {kind} metric; allowed: quantity, framework, variant, "
                                         "reading" + (", expect" if kind == "accuracy_vs_chance" else ""))
        return {"value": _operand("value", base, {}, kind, bad)}
    for k in ("numerator", "denominator"):
        if k not in metric:
            raise bad(f"metric.{k}", f"missing; a {kind} metric needs numerator and denominator")
    operands = {k: _operand(k, base, metric[k], kind, bad) for k in ("numerator", "denominator")}
    if operands["numerator"] == operands["denominator"]:
        raise bad("metric", "numerator and denominator are the same measurement; a ratio needs two")
    return operands


def _operand(key: str, base: dict[str, Any], extra: dict[str, Any], kind: str, bad: Bad) -> Operand:
    stated = {**base, **extra}
    for k in ("quantity", "framework", "variant"):
        if k not in stated:
            raise bad(f"metric.{key}.{k}" if key != "value" else f"metric.{k}",
                      f"missing; a {kind} metric needs quantity, framework and variant "
                      f"(at metric level or in {'numerator/denominator' if key != 'value' else 'the metric'})")
    op = Operand(**{"reading": "reported", **stated})
    where = "metric" if key == "value" else f"metric.{key}"
    if op.reading != "reported" and op.quantity not in MEMORY_PEAKS:
        raise bad(f"{where}.reading", f"a reading applies to the memory peaks ({', '.join(MEMORY_PEAKS)}) only, "
                                      f"not {op.quantity}")
    if op.quantity in MEMORY_PEAKS and "reading" not in stated:
        raise bad(f"{where}.reading", "missing; a peak-memory claim names in advance the one reading that "
                                      f"judges it: {', '.join(READINGS)}")
    if op.variant.startswith("+") and not op.variant.startswith(TUNED_ALONE):     # tuned's own are checked below
        pitfall = op.variant[1:]
        if pitfall not in PITFALLS:
            raise bad(f"{where}.variant", f"unknown pitfall {pitfall!r} in {op.variant!r}; "
                                          f"known: {', '.join(sorted(PITFALLS))}")
        if PITFALLS[pitfall]["framework"] != op.framework:
            raise bad(f"{where}.variant", f"{op.variant!r} is a {PITFALLS[pitfall]['framework']} pitfall; "
                                          f"the planner runs it on {PITFALLS[pitfall]['framework']} only, "
                                          f"not {op.framework}")
    return op


def _check_metric(metric: dict[str, Any], operands: dict[str, Operand], bad: Bad) -> None:
    """The keys that belong to one metric kind only: expect, fixed_variant, direction."""
    kind = metric["kind"]
    if kind == "ratio" and "fixed_variant" in metric:
        raise bad("metric.fixed_variant", "used by effect_disappears_with_fix only")
    if kind == "accuracy_vs_chance":
        if operands["value"].quantity not in ACCURACIES:
            raise bad("metric.quantity", f"accuracy_vs_chance needs one of {', '.join(ACCURACIES)}")
        if "expect" not in metric:
            raise bad("metric.expect", "missing; allowed: at_chance, above_chance")
    elif "expect" in metric:
        raise bad("metric.expect", "used by accuracy_vs_chance only")
    fixed_variant = metric.get("fixed_variant", "fixed")
    if kind == "effect_disappears_with_fix" and fixed_variant in {o.variant for o in operands.values()}:
        raise bad("metric.fixed_variant", f"{fixed_variant!r} is also the posted variant; they must differ")
    if kind == "effect_disappears_with_fix" and "direction" not in metric:
        raise bad("metric.direction", "missing; an effect that disappears with the fix states which way it points "
                                      "as posted: greater (above the similar band) or less (below it)")
    if "direction" in metric and kind not in ("ratio", "effect_disappears_with_fix"):
        raise bad("metric.direction", "used by ratio and effect_disappears_with_fix only")


def _check_figure(fig: dict[str, Any], key: str, bad: Bad) -> None:
    forms = [k for k in FIGURE_FORMS if k in fig]
    if len(forms) != 1:
        raise bad(key, f"a figure states exactly one of {', '.join(FIGURE_FORMS)}; this one states "
                       f"{', '.join(forms) or 'none'}")
    if forms[0] == "text" and fig["unit"] != "qualitative":
        raise bad(f"{key}.unit", f"a text-only figure has unit 'qualitative', not {fig['unit']!r}")
    if forms[0] != "text" and fig["unit"] == "qualitative":
        raise bad(f"{key}.unit", f"a numeric figure needs a measurement unit; allowed: "
                                 f"{', '.join(u for u in UNITS if u != 'qualitative')}")
    if forms[0] == "range" and fig["range"][0] > fig["range"][1]:
        raise bad(f"{key}.range", f"must be [low, high], got {fig['range']!r}")
    if forms[0] != "text":
        _non_negative(fig[forms[0]], fig["unit"], f"{key}.{forms[0]}", bad)


def _non_negative(stated: float | list[float], unit: str, key: str, bad: Bad) -> None:
    """Times, memory, rates, counts and ratios of them are never below zero: such a figure is a typo."""
    dim = UNITS[unit][0]
    if dim in NON_NEGATIVE and any(v < 0 for v in (stated if isinstance(stated, list) else [stated])):
        raise bad(key, f"{stated!r} {unit} is negative, and {NON_NEGATIVE[dim]} cannot be")


def _check_tolerance(claim: Claim, bad: Bad) -> None:
    t = claim.tolerance
    forms = [k for k in (*AROUND, *BOUNDS) if k in t]
    if len(forms) != 1:
        raise bad("tolerance", f"state exactly one of relative, absolute, range, at_least, at_most "
                               f"(plus unit for a bound); got {', '.join(forms) or 'none'}")
    form = forms[0]
    if "unit" in t:
        if form == "relative":
            raise bad("tolerance.unit", "a relative tolerance has no unit")
        if UNITS[t["unit"]][0] != claim.dimension:
            allowed = [u for u, (d, _) in UNITS.items() if d == claim.dimension]
            raise bad("tolerance.unit", f"{t['unit']!r} does not measure {claim.dimension}; "
                                        f"allowed: {', '.join(allowed) or '(none: give the bound in base units)'}")
    if form == "range" and t["range"][0] >= t["range"][1]:
        raise bad("tolerance.range", f"must be [low, high] with low < high, got {t['range']!r}")
    if form in BOUNDS:
        unit = t.get("unit") or next((u for u, (d, _) in UNITS.items() if d == claim.dimension), "x")
        _non_negative(t[form], unit, f"tolerance.{form}", bad)
    if claim.kind == "effect_disappears_with_fix" and form != "range":
        raise bad("tolerance", "effect_disappears_with_fix needs range = [low, high]: the band in which the "
                               "two frameworks count as similar")
    if claim.kind == "accuracy_vs_chance" and form != "absolute":
        raise bad("tolerance", "accuracy_vs_chance needs absolute = <margin above chance that counts as learning>")
    if claim.kind in ("value", "ratio") and form in AROUND:
        _reference_figures(claim, bad)       # must be derivable from the published figures
    if claim.kind == "ratio" and claim.direction:
        span = claim.bounds() or reference(claim, bad)
        assert span is not None          # a ratio's tolerance is a bound, or taken around a published figure
        low, high = span
        if (claim.direction == "greater" and high <= 1) or (claim.direction == "less" and low >= 1):
            raise bad("metric.direction", f"{claim.direction!r} contradicts the tolerance, which accepts only ratios "
                                          f"{'at or below' if claim.direction == 'greater' else 'at or above'} 1")
    # a bound needs the metric's unit: base units unless `unit` says otherwise
    if form in BOUNDS and "unit" not in t and claim.dimension not in ("ratio", "fraction", "batch", "samples"):
        allowed = [u for u, (d, _) in UNITS.items() if d == claim.dimension]
        raise bad("tolerance.unit", f"missing; a bound on {claim.dimension} needs a unit: {', '.join(allowed)}")


def _reference_figures(claim: Claim, bad: Bad) -> list[dict[str, Any]]:
    """The published figure(s) a relative/absolute tolerance is taken around; refuses ambiguity."""
    def one(op: Operand, role: str) -> dict[str, Any]:
        found = claim.figures_for(op)
        found = [f for f in found if f["unit"] != "x"]
        if len(found) != 1:
            form = next(k for k in AROUND if k in claim.tolerance)
            raise bad("published", f"a {form} tolerance needs exactly "
                                   f"one numeric figure for the {role} ({op.framework}, {op.variant}, "
                                   f"{op.quantity}); found {len(found)}: set framework, variant and quantity "
                                   f"on the figures, or use a bound (range, at_least, at_most)")
        fig = found[0]
        dim = QUANTITIES[op.quantity][0]
        if UNITS[fig["unit"]][0] != dim:
            allowed = [u for u, (d, _) in UNITS.items() if d == dim]
            raise bad("published", f"figure {fig['label']!r} has unit {fig['unit']!r}, which does not measure "
                                   f"{op.quantity}; allowed: {', '.join(allowed)}")
        return fig

    if claim.kind == "value":
        return [one(claim.operands["value"], "value")]
    ratio = claim.ratio_figure()
    if ratio is not None:
        return [ratio]
    num, den = one(claim.operands["numerator"], "numerator"), one(claim.operands["denominator"], "denominator")
    if UNITS[num["unit"]][0] != UNITS[den["unit"]][0]:
        raise bad("published", f"figures {num['label']!r} ({num['unit']}) and {den['label']!r} ({den['unit']}) "
                               "measure different things; a ratio needs one dimension")
    return [num, den]


def reference(claim: Claim, bad: Bad | None = None) -> tuple[float, float] | None:
    """The published figure a relative/absolute tolerance is taken around, as an interval (base units)."""
    if claim.kind not in ("value", "ratio") or not any(k in claim.tolerance for k in AROUND):
        return None
    figs = _reference_figures(claim, bad or (lambda key, problem: UserError(problem)))
    if claim.kind == "value":
        return interval(figs[0])
    if len(figs) == 1:
        return interval(figs[0])
    (nlo, nhi), (dlo, dhi) = interval(figs[0]), interval(figs[1])
    return nlo / dhi if dhi else math.inf, (nhi / dlo if dlo else math.inf)


# --- what the claims need ----------------------------------------------------------------------

def needs(claims: list[Claim], experiments: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Experiment name -> {"variants": set of named variants (always "fixed"), "ablation": bool}.

    A "+<pitfall>" operand needs ablation on and a named variant that contains the pitfall; with
    ``experiments`` given, the first such variant of the experiment is added to the set.
    """
    out: dict[str, dict[str, Any]] = {}
    for claim in claims:
        entry = out.setdefault(claim.experiment, {"variants": {"fixed"}, "ablation": False})
        for variant in sorted(claim.variants()):
            if not variant.startswith("+"):
                entry["variants"].add(variant)
                continue
            entry["ablation"] = True
            exp = (experiments or {}).get(claim.experiment)
            if exp is None:
                continue
            pitfall = variant[1:]
            if not any(pitfall in exp.variants.get(v, {}).get("pitfalls", []) for v in entry["variants"]):
                holders = [v for v, d in exp.variants.items() if pitfall in d["pitfalls"]]
                if holders:
                    entry["variants"].add("as_posted" if "as_posted" in holders else holders[0])
    return out


def check_against(claims: list[Claim], experiments: dict[str, Any]) -> None:
    """Refuse claims whose experiment, seed or variants the experiments do not define."""
    for claim in claims:
        exp = experiments.get(claim.experiment)
        where = f"{claim.file}: claim {claim.id!r}"
        if exp is None:
            raise UserError(f"{where}: experiment: no experiment named {claim.experiment!r}; "
                            f"known: {', '.join(sorted(experiments))}")
        carried = exp.doc["experiment"].get("seed_case")
        if claim.source["seed"] != carried:
            raise UserError(f"{where}: source.seed: {claim.source['seed']!r} is not the seed of experiment "
                            f"{exp.name!r}, which carries " + (f"{carried!r}" if carried else
                            "none (set seed_case in its [experiment] table)"))
        for variant in sorted(claim.variants()):
            if variant in ("fixed", TUNED):          # every experiment has both (tuned: reprokit/plan/tuning.py)
                continue
            if variant.startswith(TUNED_ALONE):      # one of tuned's settings alone on fixed, planned with tuned
                if variant[len(TUNED_ALONE):] not in TUNED_SETTINGS:
                    raise UserError(f"{where}: variant: {variant!r} names no setting of tuned; they are: "
                                    f"{', '.join(TUNED_ALONE + s for s in TUNED_SETTINGS)}")
                continue
            if variant.startswith("+"):
                if not any(variant[1:] in d["pitfalls"] for d in exp.variants.values()):
                    raise UserError(f"{where}: variant: {variant!r} needs a variant of {exp.name!r} that "
                                    f"contains {variant[1:]!r}; its variants: "
                                    f"{', '.join(exp.variants) or '(none besides fixed)'}")
            elif variant not in exp.variants:
                raise UserError(f"{where}: variant: {exp.name!r} has no variant {variant!r}; it has: fixed"
                                + "".join(f", {v}" for v in exp.variants))

"""The posted code beside its reconstruction: does the kit's ``as_posted`` variant stand in for the post's own
scripts, run unmodified as the ``verbatim`` variant?

Everything is read from the two variants' result files and from their pairs' certificates (the training FLOPs
per sample of the models each side trained: one counter for the kit's models and the scripts' captured ones).
The rules are fixed before any run: a row of the setting (samples per step, steps per epoch, parameters,
training FLOPs per sample) is the same when it is equal in both variants; a framework ratio (the reference over
another: PyTorch / TensorFlow) agrees
when the reconstruction's is within ``RATIO_TOLERANCE`` of the posted code's. The ratios are judged only on
the same setting: where a row differs (a quick profile's narrower model), they are *not comparable*, and
said so; a quantity one of the four runs lacks is *not measured*.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reprokit.kits.contract.names import LABELS, REFERENCE, compared, ratios
from reprokit.report.markdown import anchor, md, table
from reprokit.results import metrics, units
from reprokit.results.runs import POSTED, VERBATIM

if TYPE_CHECKING:
    from reprokit.plan.experiments import Experiment

RATIO_TOLERANCE = 0.10
SETTING = ("effective_batch_size", "train_steps_per_epoch", "parameters")
RATIOS = ("samples_per_s", "peak_memory_bytes")
HEADING = "The posted code beside its reconstruction"
RULES = ("Does the `as_posted` variant, the kit's rebuild of the posts' code from the spec, stand in for the posted "
         "scripts themselves (`verbatim`, run unmodified under the probe)? Each row's rule was fixed before the run: "
         "a row of the setting (samples per step, steps per epoch, parameters, training FLOPs per sample from each "
         "pair's certificate) is the same when it is equal in both variants; a framework ratio agrees when the "
         f"rebuild's is within {RATIO_TOLERANCE:.0%} of the posted code's. The ratios are judged only where the "
         "setting is the same; a quantity one of the four runs lacks is *not measured*.")
PHASES = (("warmup", "warmup_peak_memory_bytes"), ("training", "train_peak_memory_bytes"),
          ("evaluation", "eval_peak_memory_bytes"))
CAUSES = {"warmup": "there already before its first measured step: what the process holds before training (its "
                    "data as it was loaded, its framework's setup), not what the steps add",
          "training": "in its training steps", "evaluation": "in its evaluation passes"}


class Judged:
    """The comparison of one experiment, read once: its table's rows, and its conclusion in one sentence."""

    def __init__(self, by_variant: dict[str, dict[str, list[dict[str, Any]]]], certs: list[dict[str, Any]]):
        self.by_variant = by_variant
        self.frameworks = sorted(set(by_variant[VERBATIM]) & set(by_variant[POSTED]))
        self.compared = compared({*by_variant[VERBATIM], *by_variant[POSTED]})     # the reference first
        self.flops = {v: _flops(certs, v) for v in (VERBATIM, POSTED)}
        self.rows: list[list[str]] = []
        self.differs: list[str] = []          # the setting's rows that differ, in either framework
        self.missing = [f"no finished {LABELS[fw]} run of `{v}`" for v in (VERBATIM, POSTED)    # what cannot be read
                        for fw in self.compared if not by_variant[v].get(fw)]
        self.verdicts: dict[str, str] = {}    # a ratio's short name -> its verdict
        for fw in self.frameworks:
            for name in SETTING:
                self._setting_row(fw, metrics.QUANTITIES[name].short, *(self._median(v, fw, name)
                                                                        for v in (VERBATIM, POSTED)))
            self._setting_row(fw, "training FLOPs per sample", *((self.flops[v] or {}).get(fw)
                                                                 for v in (VERBATIM, POSTED)))
        for name in RATIOS:
            for other in self.compared[1:]:
                self._ratio_row(name, other)

    def _median(self, variant: str, fw: str, name: str) -> float | None:
        try:
            return metrics.median(self.by_variant[variant][fw], name)
        except metrics.NotMeasured as exc:
            self.missing.append(f"{metrics.QUANTITIES[name].short} ({LABELS[fw]}, `{variant}`): {exc.reason}")
            return None

    def _setting_row(self, fw: str, what: str, posted_code: float | None, rebuilt: float | None) -> None:
        if posted_code is None or rebuilt is None:
            verdict = "not measured"
        elif posted_code == rebuilt:
            verdict = "same"
        else:
            verdict = "**differs**"
            self.differs.append(what)
        self.rows.append([f"{LABELS[fw]}: {what}", _count(posted_code), _count(rebuilt), "equal", verdict])

    def _ratio_row(self, name: str, other: str) -> None:
        q = metrics.QUANTITIES[name]
        pair = [self._ratio(v, name, other) for v in (VERBATIM, POSTED)]
        verbatim, posted = pair
        rule = f"within {RATIO_TOLERANCE:.0%}"
        if verbatim is None or posted is None:
            verdict = "not measured"
        elif self.differs:
            verdict = "not comparable"
        else:
            off = posted / verbatim - 1
            verdict = f"agrees ({off:+.0%})" if abs(off) <= RATIO_TOLERANCE else f"**differs** ({off:+.0%})"
        # keyed by the quantity; with more than one other framework, by the pair and the quantity
        self.verdicts[q.short if len(self.compared) == 2 else f"{LABELS[other]} {q.short}"] = verdict
        self.rows.append([f"{LABELS[REFERENCE]} / {LABELS[other]} {q.short}",
                          *(f"{x:.2f}x" if x is not None else "not measured" for x in pair), rule, verdict])

    def _ratio(self, variant: str, name: str, other: str) -> float | None:
        if not {REFERENCE, other} <= set(self.frameworks):
            return None
        a, b = (self._median(variant, fw, name) for fw in (REFERENCE, other))
        return a / b if a is not None and b else None

    def memory_by_phase(self) -> str | None:
        """Where the memory ratio differs: each phase's peak of both variants, and where the gap appears."""
        memory = metrics.QUANTITIES["peak_memory_bytes"].short
        if not any(v.startswith("**differs") for k, v in self.verdicts.items() if k.endswith(memory)):
            return None
        found = {fw: self._phase_peaks(fw) for fw in self.frameworks}
        phases = {fw: rows for fw, rows in found.items() if rows}
        if len(phases) != len(found):
            return None
        gaps = {f: max(p for _, p, _ in rows) - max(r for _, _, r in rows) for f, rows in phases.items()}
        fw = max(gaps, key=lambda f: abs(gaps[f]))          # the framework whose peak moved most
        gap = gaps[fw]
        first = next((ph for ph, p, r in phases[fw] if gap and (p - r) / gap >= 0.5), None)  # most of the gap
        shown = "\n".join(f"- {LABELS[f]}: " + ", ".join(f"{ph} {units.memory(p)} vs {units.memory(r)}"
                                                          for ph, p, r in rows) for f, rows in phases.items())
        where = ("" if first is None else f", and most of it is {CAUSES[first]}" if first == "warmup"
                 else f", most of it {CAUSES[first]}")
        return (f"The peak memory gap is largest in {LABELS[fw]} ({'+' if gap >= 0 else '-'}"
                f"{units.memory(abs(gap))} in the posted code){where}. Peak memory by phase, median, posted code vs "
                f"rebuilt:\n\n{shown}")

    def _phase_peaks(self, fw: str) -> list[tuple[str, float, float]] | None:
        """(phase, the posted code's median peak, the rebuilt's); None where a phase was not read."""
        try:
            return [(phase, metrics.median(self.by_variant[VERBATIM][fw], name),
                     metrics.median(self.by_variant[POSTED][fw], name)) for phase, name in PHASES]
        except metrics.NotMeasured:
            return None

    def conclusion(self) -> str:
        if self.differs:
            named = list(dict.fromkeys(self.differs))
            rows = ", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1 else named[0]
            return (f"**not comparable** on this setting: the {rows} differ, so the ratios are not judged (run both "
                    f"variants at the same size, e.g. `--profile standard`)")
        verdicts = self.verdicts
        if "not measured" in verdicts.values():
            more = f"; and {len(self.missing) - 2} more" if len(self.missing) > 2 else ""
            return "**not measured**: " + "; ".join(self.missing[:2]) + more
        off = [f"{what} {v.replace('**', '')}" for what, v in verdicts.items() if v.startswith("**differs")]
        if off:
            return f"**differs** on the same setting: {', '.join(off)}: the reconstruction does not stand in here"
        return (f"**agrees**: the same setting, and each {ratios(self.compared)} ratio within {RATIO_TOLERANCE:.0%} "
                f"of the posted code's")


def _flops(certs: list[dict[str, Any]], variant: str) -> dict[str, float] | None:
    """Training FLOPs per sample by framework, from the certificate of the variant's own pair."""
    for cert in certs:
        if set(cert.get("variant", {}).values()) == {variant}:
            check = next((c for c in cert.get("checks", []) if c["name"] == "flops"), None)
            if check and (check.get("numbers") or {}).get("per_sample"):
                per_sample: dict[str, float] = check["numbers"]["per_sample"]
                return per_sample
    return None


def _count(x: float | None) -> str:
    if x is None:
        return "not measured"
    return f"{x:,.0f}" if float(x).is_integer() else units.sig(x)


def _present(by_variant: dict[str, Any]) -> bool:
    return bool(by_variant.get(VERBATIM)) and bool(by_variant.get(POSTED))


def heading(exp_name: str) -> str:
    return f"{HEADING}: {exp_name}"


def first_screen_line(exp_name: str, by_variant: dict[str, Any], certs: list[dict[str, Any]]) -> str | None:
    if not _present(by_variant):
        return None
    link = f"#{anchor(heading(exp_name))}"
    return (f"- **The posted code itself (`verbatim`) against the reconstruction:** "
            f"{Judged(by_variant, certs).conclusion()} ([the comparison]({link})).")


def section(exp_name: str, exp: Experiment | None, by_variant: dict[str, Any],
            certs: list[dict[str, Any]]) -> str | None:
    """The table and its conclusion, with what the reconstruction declares it changed; None without both."""
    if not _present(by_variant):
        return None
    judged = Judged(by_variant, certs)
    out = [f"### {md(heading(exp_name))}",
           "Does the `as_posted` variant, the kit's rebuild of the posts' code, stand in for the posted scripts "
           f"themselves (`verbatim`)? The rules, and what the rebuild declares: [details.md](details.md#"
           f"{anchor(HEADING + ': ' + exp_name)}).",
           table(judged.rows, ["", "posted code (`verbatim`)", "rebuilt (`as_posted`)", "rule", "verdict"]),
           f"**Reconstruction:** {judged.conclusion()}."]
    where = judged.memory_by_phase()
    if where:
        out.append(where)
    return "\n\n".join(out)


def details(exp: Experiment | None, by_variant: dict[str, Any]) -> str | None:
    """details.md: what the reconstruction declares it rebuilt, for an experiment whose report compares it."""
    if not _present(by_variant):
        return None
    description = ((exp.doc.get("variants") or {}).get(POSTED) or {}).get("description") if exp else None
    declared = f"What the reconstruction declares it rebuilt: {md(description)}. " if description else ""
    return declared + "The posted scripts ran after their declared shims, listed under *The scripts, as the probe " \
                      "ran them* in the report."

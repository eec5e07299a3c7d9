"""The claims as the report shows them: a short table in report.md, each claim in full in details.md."""
from __future__ import annotations

from collections import Counter

from reprokit.claims import sequential
from reprokit.claims.claims import Claim, Operand
from reprokit.claims.verdicts import STATUSES, Verdict, fmt_figure, posted_text
from reprokit.kits.contract.names import LABELS
from reprokit.report.markdown import anchor, md, short, table
from reprokit.results.metrics import QUANTITIES


def overview(found: list[Verdict]) -> str:
    """report.md's claims table: claim, what was published, what we measured, the verdict."""
    several = len({(v.profile, v.device) for v in found if v.profile}) > 1
    rows = []
    for v in found:
        c = v.claim
        row = [f"[{md(c.id)}](details.md#{anchor(c.id)})", md(short(c.title, 90)),
               md(short(posted_text(c), 60)), md(short(v.ours, 100)), f"**{v.label}**"]
        if several:
            row.insert(4, f"{v.profile} ({v.device})" if v.profile else "-")
        rows.append(row)
    headers = ["claim", "what was claimed", "published", "ours", "verdict"]
    if several:
        headers.insert(4, "profile")
    out = ["## Claims"]
    if any(v.indicative for v in found):
        out.append("> **Indicative (quick profile).** A ratio or an effect gets a verdict on every profile; on "
                   "`quick` it is measured on small models on a CPU and only indicates whether the effect "
                   "exists. Absolute figures of the posts' GPUs are *not comparable* here.")
    out.append(table(rows, headers))
    counts = Counter(v.status for v in found)
    out.append("Verdicts are computed from the result files, never typed in: "
               + ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) + ". *Not comparable*: the quantity "
               "cannot be measured on this profile or hardware. *Not measured*: the results lack the runs or the "
               "fields the claim needs. Why each verdict, the published words, the metric, the tolerance and the "
               "result files: [details.md](details.md#claims).")
    return "\n\n".join(out)


def repeats(stops: list[sequential.Stop], rule: sequential.Rule) -> str:
    """report.md's word on --repeats auto: per ratio claim, the repeats it needed and why the rule stopped."""
    rows = [[f"[{md(s.claim.id)}](details.md#{anchor(s.claim.id)})", str(s.repeats),
             md(sequential.line(s, rule))] for s in stops]
    head = (f"## Repeats: until each claim is decided\n\n`--repeats auto`: {sequential.MIN_REPEATS} repeats of each "
            f"configuration, then one more at a time of an undecided claim's, up to {rule.cap}. A claim is decided "
            f"when the interval of each ratio it reads lies inside or outside its band; each look's interval is at "
            f"level 1 - {sequential.ALPHA:g} / (looks x ratios), so over all looks a decision is wrong with "
            f"probability at most {sequential.ALPHA:g} (docs/report.md, *Repeats that stop when the answer is clear*).")
    if not rows:
        return head + "\n\nNo claim here is judged by a ratio that more repeats could decide."
    return head + "\n\n" + table(rows, ["claim", "repeats", "why it stopped"])


def details(found: list[Verdict]) -> str:
    """details.md's claims: every claim in full, with its verdicts and the files they come from."""
    out = ["## Claims"]
    by_claim: dict[str, list[Verdict]] = {}
    for v in found:
        by_claim.setdefault(v.claim.id, []).append(v)
    for verdicts in by_claim.values():
        c = verdicts[0].claim
        lines = [f"### {md(c.id)}", "", f"**{md(c.title)}** ({c.role}): “{md(c.statement)}” "
                 f"({md(c.source['seed'])}, {md(c.source['where'])}"
                 + (f"; quoted from {md(c.source['document'])}" if c.source.get("document") else "") + ")", ""]
        for v in verdicts:
            where = f" on {v.profile} ({v.device})" if v.profile else ""
            files = ", ".join(f"[{i[:8]}](results/{i}.json)" for i in dict.fromkeys(v.run_ids)) or "none"
            lines.append(f"- **{v.label}**{where}: {md(v.why)}. *Ours:* {md(v.ours)}. *Result files:* {files}.")
        lines += ["- *Published:* " + "; ".join(md(fmt_figure(f)) for f in c.published) + ".",
                  f"- *Metric:* {metric_text(c)}. *Tolerance:* {md(tolerance_text(c))}.",
                  f"- *Transfers:* {md(c.transfers)}" + (f" *Note:* {md(c.note)}" if c.note else "")]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def metric_text(c: Claim) -> str:
    def op(o: Operand) -> str:
        reading = f", {o.reading} reading" if o.quantity == "peak_memory_bytes" else ""
        return f"{QUANTITIES[o.quantity].short} of {LABELS[o.framework]} / {md(o.variant)}{reading}"
    if c.kind in ("value", "accuracy_vs_chance"):
        text = op(c.operands["value"])
        return text + (f", expected {c.expect.replace('_', ' ')}" if c.expect else "")
    text = f"{op(c.operands['numerator'])} over {op(c.operands['denominator'])}"
    if c.kind == "effect_disappears_with_fix":
        text += f", then the same with {md(c.fixed_variant)}"
    if c.direction:
        text += (f"; the published effect points {'above' if c.direction == 'greater' else 'below'} "
                 + ("the similar band" if c.kind == "effect_disappears_with_fix" else "1"))
    return f"{c.kind.replace('_', ' ')}: {text}"


def tolerance_text(c: Claim) -> str:
    t = c.tolerance
    unit = f" {t['unit']}" if "unit" in t else ""
    if "relative" in t:
        return f"within ±{t['relative']:.0%} of the published figure"
    if "absolute" in t:
        return (f"within ±{t['absolute']:g}{unit} of "
                + ("chance" if c.kind == "accuracy_vs_chance" else "the published figure"))
    if "range" in t:
        return f"between {t['range'][0]:g} and {t['range'][1]:g}{unit}"
    if "at_least" in t:
        return f"at least {t['at_least']:g}{unit}"
    return f"at most {t['at_most']:g}{unit}"

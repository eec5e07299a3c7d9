"""The report's first screen: per seed, the question, what the posted comparison really measured,
our ratio of the reference framework over each other one (PyTorch / TensorFlow) with its bracket, and the
verdicts. Short enough to read first."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from reprokit.claims.verdicts import LEARNED_MARGIN, STATUSES, Verdict, learned
from reprokit.kits.contract.names import FRAMEWORKS, LABELS, REFERENCE
from reprokit.kits.contract.spec import RunSpec
from reprokit.plan import tuning
from reprokit.report import reconstruction
from reprokit.report.markdown import device_label, md
from reprokit.results import metrics, runs, stats
from reprokit.results.metrics import NotMeasured
from reprokit.results.runs import FIXED, POSTED, SCRIPT, TUNED, VERBATIM

if TYPE_CHECKING:
    from reprokit.plan.experiments import Experiment

DEFAULT_HEADLINES = (("epoch_time_s", "reported"), ("peak_memory_bytes", "reported"))
# what the default plan left out and the flags that add it (reprokit/plan/claimed.py Choice.line), kept beside the
# report's result files by the command that ran them, so that a report rendered again still says it
LEFT_OUT_FILE = "left-out.json"
SPEED = ("time", "sample_rate", "step_rate")      # a ratio of these gets tuned's MFU beside it


def left_out_line(left_out: str | None) -> str | None:
    """The first screen's one line on what the default left out and the flags that add it (the plan's own line,
    ``left out (...): ...: add them with --all, ...``); None where nothing was."""
    if not left_out:
        return None
    return f"**Left out by default**{md(left_out.removeprefix('left out'))}."


def seed_label(exp: Experiment | None) -> str | None:
    seed = exp.doc["experiment"].get("seed_case") if exp else None
    return f"Seed {seed[:3]}" if seed else None


def headlines(exp_name: str, found: list[Verdict]) -> list[tuple[str, str]]:
    """The quantity (and reading) of the experiment's first ratio claim of the reference framework over another
    (PyTorch / TensorFlow), or defaults."""
    for v in found:
        c = v.claim
        if c.experiment == exp_name and c.kind == "ratio":
            num, den = c.operands["numerator"], c.operands["denominator"]
            if num.framework == REFERENCE != den.framework and num.quantity == den.quantity:
                return [(num.quantity, num.reading)]
    return list(DEFAULT_HEADLINES)


def _work(posted: dict[str, list[dict[str, Any]]]) -> str:
    """Did the two programs, as posted, do the same work per epoch?"""
    off, per_epoch = [], {}
    for fw in FRAMEWORKS:
        if fw not in posted:
            continue
        try:
            batch = metrics.median(posted[fw], "effective_batch_size")
            configured = metrics.field(posted[fw][0], "effective.batch_size.configured")
            per_epoch[fw] = metrics.median(posted[fw], "train_samples_per_epoch")
        except NotMeasured as exc:
            return f"not measured ({md(exc.reason)})"
        if abs(batch - configured) > 0.01:
            off.append(f"{LABELS[fw]} fed batches of {batch:g} sample(s) where {configured} were configured")
    work = " against ".join(f"{LABELS[fw]} {n:,.0f}" for fw, n in per_epoch.items())
    if off:
        return f"{' and '.join(off)}, so the two did different work: training samples per epoch {work}."
    if len(set(per_epoch.values())) == 1:
        return (f"both fed the configured batches and trained the same {next(iter(per_epoch.values())):,.0f} "
                f"samples per epoch: the same work.")
    return f"both fed the configured batch size, but trained different samples per epoch: {work}."


def _ratio(by_variant: dict[str, dict[str, list[dict[str, Any]]]], quantity: str, reading: str) -> str:
    """One line per other framework that ran beside the reference: its ratio in each variant."""
    lines = (_ratio_of(by_variant, quantity, reading, other) for other in FRAMEWORKS[1:])
    return "\n".join(line for line in lines if line)


def _ratio_of(by_variant: dict[str, dict[str, list[dict[str, Any]]]], quantity: str, reading: str,
              other: str) -> str:
    """The ratio's head, then one line per variant that ran in both: as posted, (verbatim,) fixed, tuned (with its
    MFU and what it applied), each with its test."""
    q = metrics.QUANTITIES[quantity]
    lines = []
    for variant in (POSTED, VERBATIM, FIXED, TUNED, SCRIPT):
        fws = by_variant.get(variant, {})
        if REFERENCE not in fws or other not in fws:
            continue
        name = variant.replace("_", " ")
        a, b = (metrics.collect(fws[fw], quantity, reading).values for fw in (REFERENCE, other))
        if not a or not b:
            lines.append(f"  - {name}: not measured")
            continue
        test = stats.difference(a, b).text()
        extra = _tuned(by_variant, (REFERENCE, other)) if variant == TUNED and q.dimension in SPEED else ""
        lines.append(f"  - {name} {stats.ratio(a, b).text()}{extra}. {test[0].upper()}{test[1:]}.")
    if not lines:
        return ""
    ahead = "below" if q.better == "lower" else "above"
    ref = LABELS[REFERENCE]
    head = f"- **{ref} / {LABELS[other]}, {q.short}**" + (f" ({q.better} is better: {ahead} 1 favours {ref})"
                                                          if q.better else "")
    return head + ":\n" + "\n".join(lines)


def _tuned(by_variant: dict[str, dict[str, list[dict[str, Any]]]], pair: tuple[str, str]) -> str:
    """Beside tuned's ratio: each framework's model FLOPs utilisation, and what its spec changed against fixed's."""
    tuned, fixed = by_variant[TUNED], by_variant.get(FIXED, {})
    mfu = []
    for fw in pair:
        got = metrics.collect(tuned[fw], "mfu")
        mfu.append(f"{LABELS[fw]} {got.median():.1%}" if got.values else f"{LABELS[fw]} not measured")
    results = [r for by_fw in by_variant.values() for rs in by_fw.values() for r in rs]
    applied = []
    for fw in pair:
        said = changed(tuned[fw][0], fixed[fw][0]) if fw in fixed else "unknown"
        if fw in fixed:
            choice = tuning.choose(results, RunSpec.from_dict(fixed[fw][0]["spec"]))
            said += "".join(f"; left out {s.name}: {why}" for s, why in choice.dropped)
        applied.append(f"{LABELS[fw]} {said}")
    return f" (MFU {', '.join(mfu)}; against fixed: {'; '.join(applied)})"


def changed(run: dict[str, Any], base: dict[str, Any]) -> str:
    """The numerics a run's spec sets otherwise than ``base``'s, named: what tuned applied."""
    a, b = run["spec"].get("numerics", {}), base["spec"].get("numerics", {})
    keys = sorted(k for k in {*a, *b} if a.get(k) != b.get(k))
    return ", ".join(f"{k} {a.get(k)}" if k != "cpu_threads" else f"inter_op {a[k].get('inter_op')}"
                     for k in keys) or "nothing"


def _learned(by_variant: dict[str, dict[str, list[dict[str, Any]]]], classes: int) -> str:
    parts = []
    for variant in (POSTED, VERBATIM, FIXED, TUNED, SCRIPT):
        fws = by_variant.get(variant, {})
        shown = []
        for fw in FRAMEWORKS:
            if fw not in fws:
                continue
            try:
                acc = metrics.median(fws[fw], "final_test_accuracy")
                shown.append(f"{LABELS[fw]} {acc:.3f} ({learned(acc, classes)})")
            except NotMeasured as exc:
                shown.append(f"{LABELS[fw]} {exc.short}")
        if shown:
            parts.append(f"{variant.replace('_', ' ')} {', '.join(shown)}")
    return (f"- **Did it learn?** Final test accuracy per sample, chance {1 / classes:.2f} (learned: more than "
            f"{LEARNED_MARGIN:g} above it): {'; '.join(parts)}.")


def _verdicts(exp_name: str, found: list[Verdict]) -> str | None:
    mine = [v for v in found if v.claim.experiment == exp_name]
    if not mine:
        return None
    by: dict[str, list[str]] = defaultdict(list)
    for v in mine:
        by[v.status].append(f"`{v.claim.id}`")
    indicative = " (indicative: quick profile)" if any(v.indicative for v in mine) else ""
    counts = "; ".join(f"**{s}** {len(by[s])}" + (f": {', '.join(by[s])}" if s in STATUSES[:2] and by[s] else "")
                       for s in STATUSES if by[s])
    return f"- **Verdicts{indicative}:** {counts}. Each with its reasons: [Claims](#claims)."


def answers(exp_name: str, exp: Experiment | None, by_variant: dict[str, dict[str, list[dict[str, Any]]]],
            found: list[Verdict], certs: list[dict[str, Any]], shares: str | None = None,
            at_n: list[str] | None = None) -> str:
    """One block of at most eight lines for one experiment; ``shares``: the line of each factor's share of the gap
    (reprokit/report/decomposition.py); ``at_n``: its lines at more than one device (``at_devices``, and where its
    frameworks scaled differently: reprokit/report/scaling_section.py)."""
    meta = exp.doc["experiment"] if exp else {"title": exp_name}
    label = seed_label(exp)
    head = f"### {label + ': ' if label else ''}{md(meta.get('question') or meta['title'])}"
    any_run = runs.first(by_variant)
    ran, differs = runs.as_run(any_run["spec"], exp.resolved("full") if exp else None)
    runs_here = [r for by_fw in by_variant.values() for rs in by_fw.values() for r in rs]
    where = f"{any_run['profile']} profile on {device_label(runs_here)}"
    lines = [head, "",
             f"- **Ran:** {ran} ({where})" + (f"; published: {md(meta['title'])}." if differs else ".")]
    posted = by_variant.get(POSTED, {})
    if posted:
        lines.append(f"- **The posted comparison really measured:** as posted, {_work(posted)}")
    elif exp is not None and POSTED in exp.variants:
        lines.append("- **The posted comparison:** its `as_posted` variant is not in these results, so this report "
                     "cannot say what it measured.")
    rebuilt = reconstruction.first_screen_line(exp_name, by_variant, certs)
    if rebuilt:
        lines.append(rebuilt)
    for quantity, reading in headlines(exp_name, found):
        line = _ratio(by_variant, quantity, reading)
        if line:
            lines.append(line)
    if shares:
        lines.append(shares)
    if any_run["spec"].get("data", {}).get("dataset") == "synthetic":
        lines.append("- **Did it learn?** Not asked: random labels on noise (synthetic data) measure speed, and "
                     "there is nothing to learn.")
    else:
        lines.append(_learned(by_variant, runs.classes(any_run["spec"])))
    lines += at_n or []
    verdict_line = _verdicts(exp_name, found)
    if verdict_line:
        lines.append(verdict_line)
    return "\n".join(lines)


# the findings of many devices (reprokit/kits/observation/rank_detectors.py), named on the first screen where a run
# shows one
MANY_DEVICES = ("ranks-same-samples", "same-order-every-epoch", "loss-scaled-per-replica", "loss-scale",
                "collectives-on-gloo", "evaluation-on-one-rank", "straggler")


def at_devices(results: list[dict[str, Any]], certs: list[dict[str, Any]],
               from_runs: Callable[[int], list[dict[str, Any]]] = lambda _n: []) -> str | None:
    """A pair at N devices in one line: its certificate at N (the script pair's, else ``from_runs(N)``: the kit's
    own runs'), each side's global batch, and each pitfall of many devices a run showed; None where every run held
    one device."""
    several = [r for r in results if r.get("processes") or r["spec"].get("devices", 1) > 1]
    if not several:
        return None
    devices = max(r["spec"].get("devices", 1) for r in several)
    several = [r for r in several if r["spec"].get("devices", 1) == devices]     # a sweep: its widest count
    at_n = [c for c in certs if c.get("at_n") and max(c["devices"].values()) == devices]
    names = ("batches", "gradient_reduction", "data_shards", "batchnorm_sync")
    checks = [ch for c in at_n for ch in c["checks"] if ch["name"] in names] or from_runs(devices)
    failed = [ch["name"] for ch in checks if ch["passed"] is False]
    unmeasured = [ch["name"] for ch in checks if ch["passed"] is None]
    verdict = ("not made" if not checks else f"**FAIL** ({', '.join(failed)})" if failed else
               "pass" + (f" ({', '.join(unmeasured)} not measured)" if unmeasured else ""))
    batches = []
    for r in sorted(several, key=lambda r: FRAMEWORKS.index(r["framework"]) if r["framework"] in FRAMEWORKS else 9):
        total = (r.get("processes") or {}).get("total") or {}
        batch = total.get("global_batch") or metrics.field(r, "effective.batch_size.configured")
        seen = (r.get("processes") or {}).get("seen") or "1 process"
        batches.append(f"{LABELS.get(r['framework'], r['framework'])} {batch} ({md(seen)})")
    found = sorted({f"{f['code']} ({LABELS.get(r['framework'], r['framework'])})" for r in several
                    for f in r.get("findings") or [] if f["code"] in MANY_DEVICES})
    return (f"- **At {devices} devices:** certificate at N {verdict}; global batch "
            f"{', '.join(dict.fromkeys(batches))}; pitfalls of many devices: {', '.join(found) or 'none found'}.")

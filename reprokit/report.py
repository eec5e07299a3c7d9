"""The markdown report: reads result files only, never re-runs anything."""
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

from reprokit import architecture, certify_plan, pairs, plots, stats, utilisation, verdicts
from reprokit.claims import Claim
from reprokit.experiments import Experiment

FRAMEWORKS = ("pytorch", "tensorflow")
LABEL = {"pytorch": "PyTorch", "tensorflow": "TensorFlow"}


def md(text: object) -> str:
    """Escape text that came from a run (device names, messages) for a markdown table cell."""
    s = str(text).replace("\r", " ").replace("\n", " ")
    for ch in "\\`*_[]<>|#":
        s = s.replace(ch, "\\" + ch)
    return s


def fenced(lines: list[str]) -> str:
    """A code block whose fence is longer than any run of backticks inside it."""
    ticks = "`" * max(3, 1 + max((_longest_backticks(line) for line in lines), default=0))
    return "\n".join([ticks + "text", *lines, ticks])


def _longest_backticks(line: str) -> int:
    best = run = 0
    for ch in line:
        run = run + 1 if ch == "`" else 0
        best = max(best, run)
    return best


def _mib(b: float | None) -> str:
    return "n/a" if b is None else f"{b / 2**20:,.0f} MiB"


def _num(x: float | None, fmt: str = "{:.3f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def _median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _summary(runs: list[dict], flops_per_sample: float | None = None) -> dict:
    """One figure per quantity over a configuration's repeats (the median)."""
    last = [r["metrics"]["epochs"][-1] for r in runs]
    return {
        "repeats": len(runs),
        "samples_per_s": _median([r["timing"]["samples_per_s"] for r in runs]),
        "samples_per_s_all": [r["timing"]["samples_per_s"] for r in runs],
        "mfu": _median([utilisation.mfu(r, flops_per_sample) for r in runs]),
        "step_p50": _median([r["timing"]["step_s"]["p50"] for r in runs]),
        "step_p95": _median([r["timing"]["step_s"]["p95"] for r in runs]),
        "epoch_s": _median([statistics.mean(e["train_s"] for e in r["timing"]["epochs"]) for r in runs]),
        "eval_s": _median([statistics.mean(e["eval_s"] for e in r["timing"]["epochs"]) for r in runs]),
        "peak_bytes": _median([r["memory"]["peak_bytes"] for r in runs]),
        "memory_source": runs[0]["memory"]["source"],
        "train_accuracy": _median([e["train_accuracy"] for e in last]),
        "test_accuracy": _median([e["test_accuracy"] for e in last]),
        "train_loss": _median([e["train_loss"] for e in last]),
        "test_loss": _median([e["test_loss"] for e in last]),
        "parameters": runs[0]["model"]["parameters"],
        "batch": runs[0]["effective"]["batch_size"],
        "samples_per_epoch": runs[0]["effective"]["train_samples_per_epoch"][0],
        "data_wait": _median([r["timing"]["data_wait_fraction"] for r in runs]),
        "target": runs[0]["timing"].get("target_accuracy"),
        "time_to_target": _median([r["timing"].get("time_to_target_s") for r in runs]),
        "reached_target": sum(r["timing"].get("time_to_target_s") is not None for r in runs),
        "epochs": len(runs[0]["metrics"]["epochs"]),
    }


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if not a or not b else f"{a / b:.2f}x"


def _side_by_side(s: dict[str, dict]) -> str:
    pt, tf = s.get("pytorch"), s.get("tensorflow")

    def row(label, key, fmt, ratio=True):
        cells = [fmt(x[key]) if x else "not run" for x in (pt, tf)]
        return [label, *cells, _ratio(pt[key], tf[key]) if ratio and pt and tf else ""]

    rows = [
        _throughput_row(pt, tf),
        row("step time p50 (ms)", "step_p50", lambda v: _num(v and v * 1e3, "{:.1f}")),
        row("step time p95 (ms)", "step_p95", lambda v: _num(v and v * 1e3, "{:.1f}")),
        row("training time per epoch (s)", "epoch_s", lambda v: _num(v, "{:.1f}")),
        row("evaluation time per epoch (s)", "eval_s", lambda v: _num(v, "{:.1f}")),
        row("peak memory", "peak_bytes", _mib),
        row("final train accuracy", "train_accuracy", _num, ratio=False),
        row("final test accuracy", "test_accuracy", _num, ratio=False),
        row("final train loss", "train_loss", _num, ratio=False),
        row("final test loss", "test_loss", _num, ratio=False),
        row("data-wait fraction of training time", "data_wait", lambda v: _num(v, "{:.1%}"), ratio=False),
        row("model FLOPs utilisation (of the device's peak)", "mfu", lambda v: _num(v, "{:.1%}"), ratio=False),
        ["time to target test accuracy (training s)",
         *[_to_target(x) if x else "not run" for x in (pt, tf)],
         _ratio(pt["time_to_target"], tf["time_to_target"]) if pt and tf else ""],
        ["parameters (total / trainable)",
         *[f"{x['parameters']['total']:,} / {x['parameters']['trainable']:,}" if x else "not run" for x in (pt, tf)], ""],
        ["batch size: configured / observed in tensors",
         *[(f"{x['batch']['configured']} / {x['batch']['min']}" +
            (f"-{x['batch']['max']}" if x['batch']['max'] != x['batch']['min'] else "")) if x else "not run"
           for x in (pt, tf)], ""],
        ["training samples per epoch", *[f"{x['samples_per_epoch']:,}" if x else "not run" for x in (pt, tf)], ""],
        ["repeats (figures are medians)", *[str(x["repeats"]) if x else "0" for x in (pt, tf)], ""],
    ]
    return tabulate(rows, headers=["", "PyTorch", "TensorFlow", "PyTorch / TensorFlow"], tablefmt="github")


def _to_target(x: dict) -> str:
    if x["target"] is None:
        return "no target set"
    if x["time_to_target"] is None:
        return f"not reached ({x['target']:.2f})"
    return f"{x['time_to_target']:.1f} to {x['target']:.2f} ({x['reached_target']}/{x['repeats']} runs)"


def _throughput_row(pt: dict | None, tf: dict | None) -> list[str]:
    """Samples/s with its interval over repeats, and the ratio with its own interval and significance."""
    cells = [stats.estimate(x["samples_per_s_all"]).text() if x else "not run" for x in (pt, tf)]
    ratio = ""
    if pt and tf:
        r, significant = stats.ratio(pt["samples_per_s_all"], tf["samples_per_s_all"])
        verdict = {True: "significant", False: "not significant", None: "too few repeats to tell"}[significant]
        ratio = f"{r.text('{:.2f}')}x ({verdict})"
    return ["throughput (samples/s, after warmup)", *cells, ratio]


def _flops_per_sample(certs: list[dict], profile: str) -> dict[str, float]:
    """Training FLOPs per sample by each framework's own counter, where the fixed pair's certificate counted them."""
    cert = next((c for c in certs if set(c["variant"].values()) == {FIXED}), None)
    if not cert or cert.get("profile") != profile:
        return {}
    for check in cert["checks"]:
        if check["name"] == "flops" and check.get("numbers"):
            return check["numbers"]["per_sample"]
    return {}


def _certificates(certs: list[dict]) -> str:
    """Is it the same experiment in both frameworks? The fixed pair's certificate in full, then one
    line per other variant pair; a certificate that did not run is named with its reason."""
    fixed = next((c for c in certs if set(c["variant"].values()) == {FIXED}), None)
    parts = [_certificate(fixed) if fixed else "### Equivalence certificate\n\nThe `fixed` pair has no certificate."]
    others = [c for c in certs if c is not fixed]
    if others:
        rows = [[f"{md(c['variant']['pytorch'])} / {md(c['variant']['tensorflow'])}", f"**{c['status']}**",
                 md(c["summary"]), f"[json]({certify_plan.file_name(c)})"] for c in others]
        parts.append("Certificates of the other variant pairs (an as-posted pair is expected to fail where the posts' "
                     "code differs):\n\n" + tabulate(rows, headers=["PyTorch / TensorFlow variant", "certificate",
                                                                     "what it found", "file"], tablefmt="github"))
    return "\n\n".join(parts)


def _certificate(cert: dict) -> str:
    """The certificate's verdict, checks and numbers."""
    mark = {True: "pass", False: "**FAIL**", None: "info"}
    rows = [[md(c["name"]), mark[c["passed"]], md(c["evidence"])] for c in cert["checks"]]
    ran_on = "; ".join(f"{LABEL[fw]} on {md(r.get('image') or r.get('lock') or r.get('backend'))}"
                       for fw, r in (cert.get("ran_on") or {}).items())
    file = certify_plan.file_name(cert)
    head = (f"### Equivalence certificate: **{cert['status']}**\n\n{md(cert['summary'] or cert.get('message') or '')} "
            f"Checked before any timing on the timed `{cert['profile']}` specs"
            + (f" ({ran_on})" if ran_on else "") + f" ([`{file}`]({file})).")
    parts = [head, tabulate(rows, headers=["check", "result", "evidence"], tablefmt="github")]
    if cert.get("spec_differences"):
        parts.append("Spec fields that differ between the two runs: " +
                     "; ".join(md(d) for d in cert["spec_differences"]) + ".")
    if cert.get("neutralised"):
        parts.append("Removed for the certified fp64 trajectory only: " +
                     "; ".join(f"{md(n['field'])} ({md(n['how'])})" for n in cert["neutralised"]) + ".")
    return "\n\n".join(parts)


def _memory_note(runs: dict[str, list[dict]]) -> str:
    """Which memory figures can be held against each other, from the sources the runs name."""
    sources = "; ".join(f"{LABEL[fw]}: {md(rs[0]['memory']['source'])}" for fw, rs in sorted(runs.items()))
    if next(iter(runs.values()))[0]["environment"]["device"] == "cpu":
        advice = ("On the CPU both figures are the whole process's peak resident memory, framework and "
                  "Python included: compare them, and their growth over steps, as a whole-process footprint.")
    else:
        advice = ("Compare the frameworks' own peaks (PyTorch allocated vs TensorFlow's peak with memory growth on) "
                  "for what the model needs; the NVML device peak adds each framework's context and caches and is "
                  "what nvidia-smi would show. TensorFlow without memory growth reserves nearly the whole device, "
                  "so a figure read from nvidia-smi in that mode says nothing about the model.")
    return f"Peak memory sources: {sources}. {advice} A ratio above 1 means PyTorch's figure is larger."


def _banner(results: list[dict]) -> str:
    profiles = sorted({r["profile"] for r in results})
    devices = sorted({r["environment"]["device_name"] for r in results if r["status"] == "ok"})
    kinds = sorted({r["spec"]["device"] for r in results})
    lines = [f"**Profile:** {', '.join(profiles)} · **device:** {', '.join(kinds)} "
             f"({'; '.join(md(d) for d in devices) or 'none finished'})"]
    if "quick" in profiles:
        lines.append("> **Quick profile on CPU: not the published setting.** Small models on generated data, "
                     "to check the code path and the size of effects. No figure here stands in for the "
                     "full experiment on a GPU.")
    return "\n\n".join(lines)


def _environment(results: list[dict]) -> str:
    rows = []
    for r in sorted(results, key=_order):
        if r["status"] != "ok":
            continue
        env, prov = r["environment"], r["provenance"]
        image = r.get("launcher", {}).get("image") or {}
        where = (f"{image['ref']} ({image['id'][7:19]}; base {image.get('base_digest', '-')[7:19]}"
                 f"{'' if image.get('base_pinned') else ', not pinned'})" if image
                 else f"local: {prov.get('lock') or prov.get('interpreter') or '-'}")
        gpu = env.get("gpus") or []
        rows.append([
            r["experiment"], LABEL[r["framework"]], md(r["variant"]), r["repeat"],
            md(f"{env['framework']} {env['framework_version']}"),
            md(f"CUDA {env['build'].get('cuda') or '-'}, cuDNN {env['build'].get('cudnn') or '-'}"),
            md(env["python"]), md(env["device_name"] + (f", driver {gpu[0]['driver']}" if gpu else "")),
            md(f"{env['cpu_threads']['intra_op']}/{env['cpu_threads']['inter_op']}"),
            md(where),
            md((prov.get("lock_sha256") or "-")[:12]),
            md(prov["code_commit"][:12] + (" (dirty)" if prov["code_dirty"] else "")),
            md(prov["data_sha256"][:12]),
        ])
    table = tabulate(rows, headers=["experiment", "framework", "variant", "repeat", "version", "build", "Python",
                                    "device", "threads intra/inter", "image or env", "lock sha256", "code commit",
                                    "data sha256"], tablefmt="github")
    return "\n\n".join([table, *_mixed_images(results)])


def _mixed_images(results: list[dict]) -> list[str]:
    """Results of one framework that came from different images (or environments) cannot be pooled blindly."""
    notes = []
    for fw in FRAMEWORKS:
        ids = {(r.get("launcher", {}).get("image") or {}).get("id") or r["provenance"].get("lock_sha256")
               for r in results if r["framework"] == fw and r["status"] == "ok"}
        if len(ids) > 1:
            notes.append(f"**Warning:** the {LABEL[fw]} results come from {len(ids)} different images or "
                         f"environments ({', '.join(md(str(i)[:19]) for i in sorted(map(str, ids)))}); "
                         f"figures pooled across them mix framework builds.")
    return notes


def _differences(runs: dict[str, list[dict]]) -> str:
    """Declared differences from the spec, then settings each framework reported differently."""
    rows = []
    any_run = next(iter(runs.values()))[0]
    for d in any_run["spec"].get("differences", []):
        rows.append([md(d["field"]), md(d["pytorch"]), md(d["tensorflow"]), md(d["why"])])
    pt, tf = runs.get("pytorch"), runs.get("tensorflow")
    if pt and tf:
        for key in ("tf32", "cudnn_autotune", "cpu_threads", "device_name"):
            a, b = pt[0]["environment"].get(key), tf[0]["environment"].get(key)
            if a != b:
                rows.append([md(key), md(a), md(b), "as reported by each framework at run time"])
    return tabulate(rows, headers=["what differs", "PyTorch", "TensorFlow", "why / source"], tablefmt="github")


def _model_sizes(exp: Experiment | None, runs: dict[str, list[dict]]) -> str:
    first = next(iter(runs.values()))[0]
    spec = first["spec"]
    ran = architecture.parameter_counts(spec["model"], spec["data"]["input_size"])
    if ran is None:         # a user's own model: its size is what the frameworks counted
        counted = ", ".join(f"{LABEL[fw]} {rs[0]['model']['parameters']['total']:,}" for fw, rs in sorted(runs.items()))
        return f"Model as run: the experiment's own builders; parameters as each framework counted them: {counted}."
    if exp is None or spec["profile"] == "full":
        return f"Model as run: {ran['total']:,} parameters."
    full = exp.resolved("full")
    published = architecture.parameter_counts(full["model"], full["data"]["input_size"])
    if published is None:
        return f"Model as run ({spec['profile']} profile): {ran['total']:,} parameters."
    return (f"Model as run ({spec['profile']} profile): {ran['total']:,} parameters "
            f"(input {spec['data']['input_size']}x{spec['data']['input_size']}, "
            f"dataset `{spec['data']['dataset']}`); the full experiment's model: {published['total']:,} "
            f"parameters at {full['data']['input_size']}x{full['data']['input_size']} on "
            f"`{full['data']['dataset']}`.")


def _findings(by_variant: dict[str, dict[str, list[dict]]]) -> str | None:
    """What the run-time detectors saw in each run, and what a PyTorch/TensorFlow pair differs in."""
    rows = []
    for variant in plots.variant_order(set(by_variant)):
        fws = by_variant[variant]
        for fw in FRAMEWORKS:
            seen = set()
            for r in fws.get(fw, []):
                for f in r.get("findings", []):
                    if (f["code"], f["message"]) not in seen:
                        seen.add((f["code"], f["message"]))
                        rows.append([LABEL[fw], md(variant), f"`{f['code']}`", f["severity"], md(f["message"])])
        if "pytorch" in fws and "tensorflow" in fws:
            for f in pairs.findings(fws["pytorch"][0], fws["tensorflow"][0]):
                rows.append(["both", md(variant), f"`{f['code']}`", f["severity"], md(f["message"])])
    if not rows:
        return None
    return ("Detectors judge from what each run showed, never from its variant or pitfall switches "
            "(`kits/common/detectors.py`; pairs: `reprokit/pairs.py`).\n\n" +
            tabulate(rows, headers=["framework", "variant", "finding", "severity", "evidence"], tablefmt="github"))


POSTED = "as_posted"          # the variant that reproduces the seed's own code
FIXED = "fixed"


def _q(runs: list[dict], name: str) -> float | None:
    """A quantity's median over repeats, None where the results cannot give it."""
    values = []
    for r in runs:
        try:
            values.append(verdicts.quantity(r, name))
        except (verdicts.Unavailable, KeyError, TypeError):
            continue
    return statistics.median(values) if values else None


def _x(a: float | None, b: float | None) -> str:
    return "n/a" if not a or not b else f"{a / b:.2f}x"


def _what_was_measured(exp_name: str, exp: Experiment | None, by_variant: dict[str, dict[str, list[dict]]],
                       found: list[verdicts.Verdict]) -> str:
    """Two or three sentences on what the posted comparison measured, from the as-posted and fixed runs."""
    title = md(exp.doc["experiment"]["title"] if exp else exp_name)
    seed = exp.doc["experiment"].get("seed_case") if exp else None
    head = f"**{title}**" + (f" (seed `{seed}`)" if seed else "") + ": "
    posted, fixed = by_variant.get(POSTED, {}), by_variant.get(FIXED, {})
    if not posted:
        return head + ("the as-posted variant did not run in these results, so this report cannot say what the "
                       "posted comparison measured; `reprokit reproduce --claims seeds` runs it.")
    fws = [fw for fw in FRAMEWORKS if fw in posted]
    sentences = []
    # 1. the work each program did per epoch
    off = []
    for fw in fws:
        batch, configured = _q(posted[fw], "effective_batch_size"), posted[fw][0]["effective"]["batch_size"]["configured"]
        if batch is not None and abs(batch - configured) > 0.01:
            off.append(f"{LABEL[fw]} fed batches of {batch:g} sample(s) where {configured} were configured")
    per_epoch = {fw: _q(posted[fw], "train_samples_per_epoch") for fw in fws}
    work = ", ".join(f"{LABEL[fw]} {n:,.0f}" for fw, n in per_epoch.items() if n is not None)
    if off:
        sentences.append(f"As posted, {' and '.join(off)}, so the two did different work: training samples per "
                         f"epoch {work}.")
    elif len(set(per_epoch.values())) == 1:
        sentences.append(f"As posted, both frameworks trained the configured batches and the same "
                         f"{next(iter(per_epoch.values())):,.0f} samples per epoch, so they did the same work.")
    else:
        sentences.append(f"As posted, both fed the configured batch size, but training samples per epoch differ: {work}.")
    # 2. the posted comparison measured here, as posted and fixed
    if len(fws) == 2:
        def pair(variant_runs: dict, name: str) -> str:
            if "pytorch" not in variant_runs or "tensorflow" not in variant_runs:
                return "n/a"
            return _x(_q(variant_runs["pytorch"], name), _q(variant_runs["tensorflow"], name))
        source = posted["pytorch"][0]["memory"]["source"]
        sentences.append(
            f"Measured here, PyTorch/TensorFlow time per epoch is {pair(posted, 'epoch_time_s')} as posted and "
            f"{pair(fixed, 'epoch_time_s')} fixed, samples per second {pair(posted, 'samples_per_s')} as posted "
            f"and {pair(fixed, 'samples_per_s')} fixed, and peak memory ({md(source)}) "
            f"{pair(posted, 'peak_memory_bytes')} as posted and {pair(fixed, 'peak_memory_bytes')} fixed.")
    # 3. did either framework learn
    any_run = next(iter(posted.values()))[0]
    classes = any_run["spec"]["model"]["num_classes"]
    def learned(variant_runs: dict) -> str:
        parts = []
        for fw in FRAMEWORKS:
            if fw not in variant_runs:
                continue
            acc = _q(variant_runs[fw], "final_test_accuracy")
            parts.append(f"{LABEL[fw]} {_num(acc)} ({verdicts.learned(acc, classes)})")
        return ", ".join(parts)
    sentences.append(f"Final test accuracy per sample against chance {1 / classes:.2f} (learned = more than "
                     f"{verdicts.LEARNED_MARGIN:g} above it): as posted {learned(posted)}"
                     + (f"; fixed {learned(fixed)}." if fixed else "."))
    # the posted explanations, as the measurements judge them
    explained = [v for v in found if v.claim.experiment == exp_name and v.claim.role == "explanation"]
    if explained:
        groups = defaultdict(list)
        for v in explained:
            groups[v.label].append(f"{md(v.claim.title)} (`{v.claim.id}`)")
        sentences.append("The answers' explanations, tested: " +
                         "; ".join(f"**{label}**: {', '.join(items)}" for label, items in groups.items()) + ".")
    return head + " ".join(sentences)


def _claims_section(found: list[verdicts.Verdict]) -> str:
    contexts = sorted({(v.profile, v.device) for v in found if v.profile})
    several = len(contexts) > 1
    rows = []
    for v in found:
        c = v.claim
        links = ", ".join(f"[{i[:8]}](results/{i}.json)" for i in dict.fromkeys(v.run_ids)) or "-"
        row = [f"**{md(c.id)}** ({c.role}): {md(c.title)}",
               md("; ".join(verdicts.fmt_figure(f) for f in c.published)) +
               f" (seed `{md(c.source['seed'][:3])}`, {md(c.source['where'])})",
               md(v.ours), f"**{v.label}**", md(v.why), links]
        if several:
            row.insert(3, f"{v.profile} ({v.device})" if v.profile else "-")
        rows.append(row)
    headers = ["claim", "published (unit, source)", "ours", "verdict", "why", "result files"]
    if several:
        headers.insert(3, "profile")
    out = ["## Claims"]
    if any(v.indicative for v in found):
        out.append("> **Indicative (quick profile).** A ratio or an effect gets a verdict on every profile; on "
                   "`quick` it is measured on small models on a CPU and only indicates whether the effect "
                   "exists. Absolute figures of the posts' GPUs are *not comparable* here.")
    out.append(tabulate(rows, headers=headers, tablefmt="github"))
    counts = defaultdict(int)
    for v in found:
        counts[v.status] += 1
    out.append("Verdicts are computed from the result files listed in each row, never typed in: "
               + ", ".join(f"{n} {s}" for s, n in counts.items()) + ". *Not comparable*: the quantity cannot be "
               "measured on this profile or hardware (the reason is given). *Not measured* is no verdict: the "
               "runs the claim needs are not in these results.")
    details = []
    seen = set()
    for v in found:
        c = v.claim
        if c.id in seen:
            continue
        seen.add(c.id)
        details.append(f"- `{md(c.id)}`: “{md(c.statement)}” ({md(c.source['seed'])}, {md(c.source['where'])}). "
                       f"*Metric:* {_metric_text(c)}. *Tolerance:* {md(_tolerance_text(c))}. "
                       f"*Transfers:* {md(c.transfers)}" + (f" *Note:* {md(c.note)}" if c.note else ""))
    out.append("<details><summary>Each claim: published words, metric, tolerance, what transfers</summary>\n\n"
               + "\n".join(details) + "\n\n</details>")
    return "\n\n".join(out)


def _metric_text(c: Claim) -> str:
    def op(o) -> str:
        reading = f", reading {o.reading}" if o.quantity == "peak_memory_bytes" else ""
        return f"{verdicts.SHORT[o.quantity]} of {LABEL[o.framework]} / {md(o.variant)}{reading}"
    if c.kind in ("value", "accuracy_vs_chance"):
        text = op(c.operands["value"])
        return text + (f", expected {c.expect.replace('_', ' ')}" if c.expect else "")
    text = f"{op(c.operands['numerator'])} over {op(c.operands['denominator'])}"
    if c.kind == "effect_disappears_with_fix":
        text += f", then the same with {md(c.fixed_variant)}"
    return f"{c.kind.replace('_', ' ')}: {text}"


def _tolerance_text(c: Claim) -> str:
    t = c.tolerance
    unit = f" {t['unit']}" if "unit" in t else ""
    if "relative" in t:
        return f"within ±{t['relative']:.0%} of the published figure"
    if "absolute" in t:
        return f"within ±{t['absolute']:g}{unit} of " + ("chance" if c.kind == "accuracy_vs_chance" else "the published figure")
    if "range" in t:
        return f"between {t['range'][0]:g} and {t['range'][1]:g}{unit}"
    if "at_least" in t:
        return f"at least {t['at_least']:g}{unit}"
    return f"at most {t['at_most']:g}{unit}"


def _ablation(by_variant: dict[str, dict[str, list[dict]]]) -> str | None:
    """Rows: fixed, each pitfall alone, the named variants; columns against fixed of the same framework."""
    variants = plots.variant_order(set(by_variant))
    if len(variants) < 2:
        return None
    with_split = any(r["memory"].get("train_peak_bytes") is not None
                     for runs in by_variant.values() for rs in runs.values() for r in rs)
    rows = []
    converted = False
    for fw in FRAMEWORKS:
        base = by_variant.get(FIXED, {}).get(fw)
        ref = {k: _q(base, k) for k in ("samples_per_s", "train_time_per_epoch_s", "peak_memory_bytes",
                                        "final_test_accuracy")} if base else {}
        for variant in variants:
            runs = by_variant[variant].get(fw)
            if not runs:
                continue
            pitfalls = runs[0]["spec"].get("pitfalls", [])
            summaries = runs[0]["spec"].get("pitfall_summaries", {})
            if variant == FIXED:
                what = "nothing: the experiment as declared"
            elif variant.startswith("+") and len(pitfalls) == 1:
                what = summaries.get(pitfalls[0], pitfalls[0])
            else:
                what = (f"{len(pitfalls)} pitfalls together: " if len(pitfalls) > 1 else "1 pitfall: ") + ", ".join(pitfalls)

            def cell(key: str, show) -> str:
                v = _q(runs, key)
                if v is None:
                    return "n/a"
                if variant == FIXED or not ref.get(key):
                    return show(v)
                return f"{show(v)} ({v / ref[key]:.2f}x)"
            acc = _q(runs, "final_test_accuracy")
            mark = ""
            if runs[0]["metrics"].get("averaged_over") == "batches":
                mark, converted = " †", True
            acc_cell = "n/a" if acc is None else _num(acc) + mark + (
                f" ({acc - ref['final_test_accuracy']:+.3f})" if variant != FIXED and ref.get("final_test_accuracy")
                is not None else "")
            growth = _q(runs, "memory_growth")
            row = [LABEL[fw], md(variant), md(what),
                   cell("samples_per_s", lambda v: f"{v:,.1f}"),
                   cell("train_time_per_epoch_s", lambda v: f"{v:.1f}"),
                   cell("peak_memory_bytes", _mib)]
            if with_split:
                row.append(f"{_mib(_q(runs, 'train_peak_memory_bytes'))} / {_mib(_q(runs, 'eval_peak_memory_bytes'))}")
            row += ["n/a" if growth is None else f"{growth:+.1%}", acc_cell]
            rows.append(row)
    headers = ["framework", "variant", "what it changes", "samples/s (vs fixed)", "train time per epoch, s (vs fixed)",
               "peak memory (vs fixed)"]
    if with_split:
        headers.append("memory peak training / evaluation")
    headers += ["memory growth over steps", "final test accuracy (vs fixed)"]
    out = tabulate(rows, headers=headers, tablefmt="github")
    notes = ["Each pitfall alone (`+name`) and all of a framework's together against `fixed` of the same "
             "framework, so a reader sees which mistake cost what. Ratios are against `fixed`; accuracy changes "
             "are differences. Memory growth: a line fitted through the memory sampled during training, "
             "leaving out the first quarter, over the fitted steps, relative to its level."]
    if converted:
        notes.append("† The run reported accuracy per batch, as the posted code did; shown here per sample.")
    return out + "\n\n" + " ".join(notes)


def render(name: str, results: list[dict], experiments: dict[str, Experiment],
           claims: list[Claim] | None = None, plot_files: dict[str, list[tuple[str, str]]] | None = None,
           certificates: dict[str, list[dict]] | None = None) -> str:
    """The report as markdown. ``claims`` adds verdicts; ``plot_files`` (from plots.write_all) links PNGs;
    ``certificates`` (by experiment) adds each experiment's equivalence certificates."""
    certificates = certificates or {}
    ok = [r for r in results if r["status"] == "ok"]
    failed = [r for r in results if r["status"] != "ok"]
    out = [f"# Reproducibility report: {md(name)}", _banner(results)]
    by_exp: dict[str, dict[str, dict[str, list[dict]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in ok:
        by_exp[r["experiment"]][r["variant"]][r["framework"]].append(r)
    found = verdicts.evaluate(claims, results) if claims else []
    exp_names = sorted({r["experiment"] for r in results})

    has_variants = any(set(by_exp[e]) - {FIXED} for e in exp_names) or any(
        experiments.get(e) and experiments[e].variants for e in exp_names)
    if has_variants or claims:
        cases = [_what_was_measured(e, experiments.get(e), by_exp.get(e, {}), found) for e in exp_names
                 if by_exp.get(e) and (experiments.get(e) is None or experiments[e].variants
                                       or set(by_exp[e]) - {FIXED})]
        if cases:
            out.append("## What the posted comparison really measured\n\n" + "\n\n".join(cases))
    if found:
        out.append(_claims_section(found))

    for exp_name in exp_names:
        exp = experiments.get(exp_name)
        meta = exp.doc["experiment"] if exp else {"title": exp_name}
        out.append(f"## {md(meta['title'])}")
        if meta.get("question"):
            out.append(f"*Question:* {md(meta['question'])}" +
                       (f" (seed case `{meta['seed_case']}`)" if meta.get("seed_case") else ""))
        variants = by_exp.get(exp_name)
        if not variants:
            out.append("No run of this experiment finished; see *Failed runs*.")
            continue
        runs = variants.get(FIXED)
        certs = certificates.get(exp_name, [])
        out.append(_certificates(certs) if certs else
                   "### Equivalence certificate\n\nNo certificate was given to this report for this experiment.")
        if runs:
            out.append(_model_sizes(exp, runs))
            if len(variants) > 1:
                out.append("### PyTorch and TensorFlow, `fixed` variant")
            flops = _flops_per_sample(certs, next(iter(runs.values()))[0]["profile"])
            out.append(_side_by_side({fw: _summary(rs, flops.get(fw)) for fw, rs in runs.items()}))
            out.append(_memory_note(runs))
        else:
            out.append("The `fixed` variant did not finish, so there is no like-for-like comparison here.")
        ablation = _ablation(variants)
        if ablation:
            out.append("### Ablation: which mistake cost what\n\n" + ablation)
        for caption, file in (plot_files or {}).get(exp_name, []):
            out.append(f"![{md(caption)}]({file})")
        found_at_run_time = _findings(variants)
        if found_at_run_time:
            out.append("### Findings at run time\n\n" + found_at_run_time)
        if runs:
            out.append("### What differs between the two runs\n\n" + _differences(runs))
    out.append("## Environment and provenance\n\n" + (_environment(results) if ok else "No run finished."))
    if failed:
        out.append("## Failed runs")
        for r in failed:
            f = r["failure"]
            out.append(f"- `{r['run_id']}` {md(r['experiment'])} / {LABEL[r['framework']]} / {md(r['variant'])} / "
                       f"repeat {r['repeat']}: **{f['kind']}**: {md(f['message'])}\n\n" + fenced(f["log_tail"][-15:]))
    plots_note = " and the plots beside this report" if plot_files and any(plot_files.values()) else ""
    out.append(f"## Result files\n\nEvery figure above{plots_note} is computed from these files in `results/`:\n\n" +
               "\n".join(f"- [`{r['run_id']}.json`](results/{r['run_id']}.json): {md(r['experiment'])}, "
                         f"{LABEL[r['framework']]}, {md(r['variant'])}, repeat {r['repeat']}, {r['status']}"
                         for r in sorted(results, key=_order)))
    return "\n\n".join(out) + "\n"


def _order(r: dict) -> tuple:
    """experiment, framework, then fixed, each +pitfall, the named variants (as plots.variant_order)."""
    rank = 0 if r["variant"] == FIXED else 1 if r["variant"].startswith("+") else 2
    return r["experiment"], r["framework"], rank, r["variant"], r["repeat"]


def write(report_dir: Path, name: str, results: list[dict], experiments: dict[str, Experiment],
          claims: list[Claim] | None = None, certificates: dict[str, list[dict]] | None = None) -> Path:
    """report.md and its PNG plots in report_dir; plots from an earlier report there are replaced."""
    report_dir.mkdir(parents=True, exist_ok=True)
    for old in [*report_dir.glob("*-throughput.png"), *report_dir.glob("*-memory.png")]:
        old.unlink()
    plot_files = plots.write_all(report_dir, results)
    path = report_dir / "report.md"
    path.write_text(render(name, results, experiments, claims=claims, plot_files=plot_files,
                           certificates=certificates))
    return path

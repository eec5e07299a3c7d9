"""report.md, details.md, summary.csv and the plots of one report: from result files only, never a re-run.

report.md opens with a first screen that answers each seed's question; the claims, the
experiments' tables, the environment and the result files follow. details.md holds the long
evidence: how the figures are computed, every claim in full, every certificate check.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from reprokit.claims import sequential
from reprokit.claims.claims import Claim
from reprokit.claims.verdicts import Verdict, evaluate
from reprokit.kits.contract.files import write_text_atomic
from reprokit.kits.contract.names import LABELS, compared, joined, ratios
from reprokit.plan.experiments import Experiment
from reprokit.report import (
    ablation_section,
    certificate_section,
    certified_at_n,
    claims_section,
    decomposition,
    explanations,
    first_screen,
    plots,
    processes_section,
    reconstruction,
    scaling_section,
    sections,
    settings_table,
    summary_csv,
    tuned_section,
)
from reprokit.report.markdown import anchor, device_label, md, on_cpu_instead
from reprokit.results import runs, stats
from reprokit.results.shares import Decomposition

PLOT_SUFFIXES = ("-throughput.png", "-memory.png", decomposition.SUFFIX)


def _banner(name: str, results: list[dict[str, Any]]) -> str:
    ok = [r for r in results if r["status"] == "ok"]
    profiles = sorted({r["profile"] for r in results})
    devices = sorted({r["environment"]["device_name"] for r in ok})
    lines = [f"# Reproducibility report: {md(name)}",
             f"**Profile:** {', '.join(profiles)} · **device:** {device_label(results)} "
             f"({'; '.join(md(d) for d in devices) or 'none finished'}) · {len(results)} runs, "
             f"{len(results) - len(ok)} failed · one row per run: [summary.csv](summary.csv) · "
             f"long evidence: [details.md](details.md)"]
    if "quick" in profiles:
        lines.append("> **Quick profile on CPU: not the published setting.** Small models on generated data, to "
                     "check the code path and the size of effects. No figure here stands in for the full "
                     "experiment on a GPU.")
    elif why := _not_published(results, profiles):
        lines.append(f"> **Not the published setting:** {'; '.join(why)}. The figures measure what ran here; "
                     f"each claim says on which setting it can be compared.")
    return "\n\n".join(lines)


def _not_published(results: list[dict[str, Any]], profiles: list[str]) -> list[str]:
    """How the runs differ from the posts' setting, as far as the result files tell (a CPU, bounded steps,
    generated data, a shorter profile)."""
    specs = [r["spec"] for r in results]
    why = []
    if any(s.get("device", "cpu") == "cpu" for s in specs) or any(map(on_cpu_instead, results)):
        why.append("it ran on a CPU")
    # a kit run's cap, or the probe's bound on a script
    bounded = sorted({s["train"].get("max_steps_per_epoch") if "train" in s else s["bounds"]["max_steps"]
                      for s in specs} - {None})
    if bounded:
        why.append(f"at most {', '.join(f'{n:,}' for n in bounded)} training steps per epoch")
    generated = sorted({s["data"]["dataset"] for s in specs} - {"cifar10"})
    if generated:
        why.append(f"on generated `{'`, `'.join(generated)}` data, not CIFAR-10")
    if "full" not in profiles:
        why.append(f"the {', '.join(profiles)} profile's length, not the posts' epochs")
    return why


def _experiment_order(grouped: runs.Grouped, experiments: dict[str, Experiment]) -> list[str]:
    """Seed experiments first, by seed: within a seed the post's own case (it has the posted code as a variant)
    before the evidence its answer cites (ResNet-50 for NVIDIA's benchmarks); then the others by name."""
    def key(name: str) -> tuple[str, bool, str]:
        exp = experiments.get(name)
        seed = (exp.doc["experiment"].get("seed_case") or "~") if exp else "~"
        return seed, not (exp and runs.POSTED in exp.variants), name
    return sorted(grouped, key=key)


def _heading(exp_name: str, exp: Experiment | None, by_variant: dict[str, Any]) -> str:
    """What ran, said in the heading when it is not the published setting (dataset, input size, width)."""
    meta = exp.doc["experiment"] if exp else {"title": exp_name}
    r = runs.first(by_variant)
    ran, differs = runs.as_run(r["spec"], exp.resolved("full") if exp else None)
    label = first_screen.seed_label(exp) or md(exp_name)
    where = f"{r['profile']} profile, {device_label(_all(by_variant))}"
    if differs:
        return f"{label}, as run: {ran} ({where})"
    return f"{md(meta['title'])} ({where})"


def _all(by_variant: dict[str, dict[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    return [r for by_fw in by_variant.values() for rs in by_fw.values() for r in rs]


def _experiment(exp_name: str, exp: Experiment | None, by_variant: dict[str, Any], certs: list[dict[str, Any]],
                plot_files: list[tuple[str, str]], heading: str, decs: list[Decomposition],
                no_plots: str | None = None) -> str:
    meta = exp.doc["experiment"] if exp else {"title": exp_name}
    published = exp.resolved("full") if exp else None
    main = runs.main_variant(by_variant)
    fixed = by_variant.get(main)
    intro = []
    if exp:
        intro.append(f"*Published setting:* {md(meta['title'])}.")
    if meta.get("question"):
        intro.append(f"*Question:* {md(meta['question'])}" +
                     (f" (seed case `{meta['seed_case']}`)." if meta.get("seed_case") else ""))
    if fixed:
        intro.append(sections.model_sizes(published, fixed))
    out = [f"## {heading}", " ".join(intro),
           certificate_section.certificates(certs, f"details.md#{anchor('equivalence certificates: ' + exp_name)}",
                                            main)]
    if fixed:
        if len(by_variant) > 1:
            out.append(f"### {joined(LABELS[fw] for fw in compared(fixed))}, `{main}` variant")
        out += [sections.side_by_side(fixed), sections.memory_note(fixed), sections.energy_note(fixed)]
    else:
        out.append(f"No finished `{main}` pair in these results, so there is no like-for-like comparison here.")
    probed = sections.probed(by_variant)
    if probed:
        out.append("### The scripts, as the probe ran them\n\n" + probed)
    tuned = tuned_section.section(by_variant)
    if tuned:
        out.append("### Tuned against fixed\n\n" + tuned)
    ablation = ablation_section.ablation(by_variant)
    if ablation:
        out.append("### Ablation: which mistake cost what\n\n" + ablation)
    shares = decomposition.section(decs)
    if shares:
        out.append(f"### {decomposition.heading(exp_name)}\n\n{shares}")
    for what, file in plot_files:
        caption = what.rstrip(".") if file.endswith(decomposition.SUFFIX) else f"{heading.replace('`', '')}: {what}"
        out.append(f"![{md(caption)}]({file})\n\n*Figure: {md(caption)}.* "
                   f"{explanations.link(explanations.PLOTS, 'How to read it')}.")
    if no_plots:
        out.append(no_plots)
    found = sections.findings(by_variant)
    if found:
        out.append("### Findings at run time\n\n" + found)
    if fixed:
        out.append("### What differs between the runs\n\n" + sections.differences(fixed))
    settings = settings_table.section(by_variant)
    if settings:
        out.append("### Every setting side by side\n\n" + settings)
    rebuilt = reconstruction.section(exp_name, exp, by_variant, certs)
    if rebuilt:
        out.append(rebuilt)
    posted = sections.posted_numerics(exp, by_variant)
    if posted:
        out.append("### As posted: each framework's own numerics\n\n" + posted)
    return "\n\n".join(out)


def _render(name: str, results: list[dict[str, Any]], experiments: dict[str, Experiment], found: list[Verdict],
            plot_files: dict[str, list[tuple[str, str]]], certificates: dict[str, list[dict[str, Any]]],
            grouped: runs.Grouped, decs: dict[str, list[Decomposition]], no_plots: str | None = None,
            stopped: str | None = None, left_out: str | None = None) -> str:
    order = _experiment_order(grouped, experiments)
    out = [_banner(name, results), *filter(None, [first_screen.left_out_line(left_out)])]
    swept = scaling_section.sweeps(results)
    if order:
        out.append("## Answers\n\n" + "\n\n".join(
            first_screen.answers(e, experiments.get(e), grouped[e], found, certificates.get(e, []),
                                 decomposition.first_screen_line(decs[e]), _at_n(e, results, certificates, swept))
            for e in order) +
            f"\n\nFigures are medians over repeats; ratios are {ratios(_frameworks(results))}; brackets and "
            "tests: [how the figures are computed](details.md#how-the-figures-are-computed).")
    if found:
        out.append(claims_section.overview(found))
    if stopped:
        out.append(stopped)
    for exp_name in order:
        by_variant = grouped[exp_name]
        exp = experiments.get(exp_name)
        out.append(_experiment(exp_name, exp, by_variant, certificates.get(exp_name, []),
                               plot_files.get(exp_name, []), _heading(exp_name, exp, by_variant), decs[exp_name],
                               no_plots))
        mine = [r for r in results if r["experiment"] == exp_name]
        several = processes_section.processes(mine)
        if several:
            out.append("### Each process of the scripts\n\n" + several)
        scaled = scaling_section.section(mine, plot_files)
        if scaled:
            out.append("### Scaling, side by side\n\n" + scaled)
    for exp_name in sorted({r["experiment"] for r in results} - set(grouped)):
        out.append(f"## {md(exp_name)}\n\nNo run of this experiment finished; see *Failed runs*.")
    out.append("## Environment and provenance\n\n" +
               (sections.environment(results) if grouped else "No run finished."))
    failures = sections.failed(results)
    if failures:
        out.append("## Failed runs\n\n" + failures)
    out.append("## Result files\n\n" + sections.result_files(results, any(plot_files.values())))
    return "\n\n".join(out) + "\n"


def _at_n(experiment: str, results: list[dict[str, Any]], certificates: dict[str, list[dict[str, Any]]],
          swept: dict[str, scaling_section.Sweep]) -> list[str]:
    """The first screen's lines of an experiment's runs at more than one device: its certificate at N, global
    batches and pitfalls; where its frameworks scaled differently."""
    mine = [r for r in results if r["experiment"] == experiment and r["status"] == "ok"]
    sweep = swept.get(experiment, {})
    lines = [first_screen.at_devices(mine, certificates.get(experiment, []),
                                     lambda n: certified_at_n.checks(sweep, n)),
             scaling_section.mismatch(swept[experiment]) if experiment in swept else None]
    return [line for line in lines if line]


def render(name: str, results: list[dict[str, Any]], experiments: dict[str, Experiment],
           claims: list[Claim] | None = None, plot_files: dict[str, list[tuple[str, str]]] | None = None,
           certificates: dict[str, list[dict[str, Any]]] | None = None) -> str:
    """report.md as markdown. ``claims`` adds verdicts; ``plot_files`` (from plots.drawing) links PNGs;
    ``certificates`` (by experiment, one per variant pair) adds each experiment's equivalence certificates."""
    found = evaluate(claims, results) if claims else []
    grouped = runs.group(results)
    return _render(name, results, experiments, found, plot_files or {}, certificates or {}, grouped,
                   _decompositions(grouped, found))


def _decompositions(grouped: runs.Grouped, found: list[Verdict]) -> dict[str, list[Decomposition]]:
    """Each experiment's decompositions, computed once: report.md, its waterfall and details.md all show them,
    and each is thousands of bootstrap draws."""
    return {e: decomposition.decompositions(e, grouped[e], found) for e in grouped}


def _frameworks(results: list[dict[str, Any]]) -> set[str]:
    return {r["framework"] for r in results}


def details(name: str, results: list[dict[str, Any]], experiments: dict[str, Experiment], found: list[Verdict],
            certificates: dict[str, list[dict[str, Any]]], grouped: runs.Grouped | None = None,
            decs: dict[str, list[Decomposition]] | None = None) -> str:
    """details.md: how the figures are computed, each explanation report.md links to (once), each experiment's
    facts in full, every claim in full, every certificate check. ``grouped`` and ``decs``, where the caller has
    them already."""
    grouped = runs.group(results) if grouped is None else grouped
    decs = _decompositions(grouped, found) if decs is None else decs
    out = [f"# Details of the report {md(name)}", "Back to the report: [report.md](report.md).",
           "## How the figures are computed\n\n" + stats.METHOD + f" Framework ratios are always "
           f"{ratios(_frameworks(results))}; each table row says which way is better. Memory is in MiB below 1 GiB "
           f"and in GiB above."]
    for title, text in explanations.TEXT.items():
        out.append(f"## {title}\n\n{text}")
        facts = [(e, fact) for e in _experiment_order(grouped, experiments)
                 for fact in [_facts(title, grouped[e])] if fact]
        out += [f"### {title}: {md(e)}\n\n{fact}" for e, fact in facts]
    if any(decs.values()):
        out.append(decomposition.DETAILS)
    rebuilt = [(e, text) for e in _experiment_order(grouped, experiments)
               for text in [reconstruction.details(experiments.get(e), grouped[e])] if text]
    if rebuilt:
        out.append(f"## {reconstruction.HEADING}\n\n{reconstruction.RULES}")
        out += [f"### {reconstruction.HEADING}: {md(e)}\n\n{text}" for e, text in rebuilt]
    if found:
        out.append(claims_section.details(found))
    if certificates:
        out.append("## Equivalence certificates")
        for exp_name in sorted(certificates):
            several = len({tuple(c["variant"]) for c in certificates[exp_name]}) > 1
            out.append(f"### Equivalence certificates: {md(exp_name)}\n\n" +
                       "\n\n".join(_certificate_details(c, several) for c in certificates[exp_name]))
    return "\n\n".join(out) + "\n"


def _facts(title: str, by_variant: dict[str, Any]) -> str | None:
    """An experiment's own part of one explanation: its memory sources, its ablation's variants in full."""
    main = by_variant.get(runs.main_variant(by_variant))
    if title == explanations.MEMORY and main:
        return sections.memory_sources(main)
    if title == explanations.ABLATION:
        return ablation_section.ablation_details(by_variant)
    return None


def _certificate_details(cert: dict[str, Any], named: bool = False) -> str:
    mark = {True: "pass", False: "FAIL", None: "info"}
    pair = certificate_section.variant_pair(cert, named)
    lines = [f"**{pair}: {cert['status']}**. {md(cert.get('summary') or cert.get('message') or '')}", ""]
    lines += [f"- **{md(c['name'])}** ({mark[c['passed']]}): {md(c['evidence'])}" for c in cert["checks"]]
    if cert.get("spec_differences"):
        lines.append("- Spec fields that differ between the two runs: " +
                     "; ".join(md(d) for d in cert["spec_differences"]) + ".")
    if cert.get("neutralised"):
        lines.append("- Removed from the certified trajectories (fp64, and the kits' own fp32 steps): " +
                     "; ".join(f"{md(n['field'])} ({md(n['how'])})" for n in cert["neutralised"]) + ".")
    return "\n".join(lines)


def write(report_dir: Path, name: str, results: list[dict[str, Any]], experiments: dict[str, Experiment],
          claims: list[Claim] | None = None, certificates: dict[str, list[dict[str, Any]]] | None = None,
          rule: sequential.Rule | None = None, left_out: str | None = None) -> Path:
    """report.md, details.md, summary.csv and the PNG plots in report_dir; plots from an earlier report
    there are replaced; ``rule``, where the repeats followed --repeats auto; ``left_out``, the plan's line on what
    the default left out (its first screen says it). Returns the path of report.md."""
    report_dir.mkdir(parents=True, exist_ok=True)
    for old in report_dir.iterdir():
        if old.name.endswith(PLOT_SUFFIXES):
            old.unlink()
    certificates = certificates or {}
    grouped = runs.group(results)
    with plots.drawing(report_dir, grouped, scaling_section.sweeps(results)) as plot_files:   # awaited at its end
        found = evaluate(claims, results) if claims else []
        decs = _decompositions(grouped, found)
        for exp_name in grouped:
            waterfall = decomposition.write_plot(report_dir, exp_name, decs[exp_name],
                                                 first_screen.seed_label(experiments.get(exp_name)) or exp_name)
            if waterfall:
                plot_files.setdefault(exp_name, []).append(waterfall)
        summary_csv.write(report_dir / "summary.csv", results)
        write_text_atomic(report_dir / "details.md", details(name, results, experiments, found, certificates,
                                                             grouped, decs))
        stopped = claims_section.repeats(sequential.stops(claims or [], results, rule), rule) if rule else None
        text = _render(name, results, experiments, found, plot_files, certificates, grouped, decs,
                       plots.unavailable(), stopped, left_out)
    path = report_dir / "report.md"
    write_text_atomic(path, text)
    return path

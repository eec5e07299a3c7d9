"""The report's sections after its first screen: per experiment, then the environment, failures and files.
The ablation table and the equivalence certificates are modules of their own: ablation_section, certificate_section.

Every figure is read through ``metrics``; a quantity a result lacks is shown as "not measured"
(or why: "GPU only", "not reached"). Table cells stay short; long evidence goes to details.md.
Framework ratios are always the reference framework (the registry's first, PyTorch) over each other one, as
PyTorch / TensorFlow, and each row says which way is better.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reprokit.kits.contract.names import FRAMEWORKS, LABELS, REFERENCE, compared, joined, label
from reprokit.kits.contract.spec import DEFAULTABLE, FRAMEWORK_DEFAULT
from reprokit.plan.experiments import Experiment
from reprokit.report import explanations, pair_findings, parameter_counts
from reprokit.report.markdown import fenced, md, short, table
from reprokit.results import metrics, runs, stats
from reprokit.results.metrics import NotMeasured

# The side-by-side table's rows in the report's order (summary.csv's is another); each reads as its quantity's
# ``row`` says (metrics.Quantity).
SIDE_BY_SIDE = ("samples_per_s", "energy_per_sample_j", "step_time_p50_s", "step_time_p95_s", "train_time_per_epoch_s",
                "eval_time_per_epoch_s", "peak_memory_bytes", "train_peak_memory_bytes", "eval_peak_memory_bytes",
                "final_train_accuracy", "final_test_accuracy", "final_train_loss", "final_test_loss",
                "data_wait_fraction", "mfu", "time_to_target_s")


def cell(rs: list[dict[str, Any]], quantity: str, show: Callable[[float], str]) -> tuple[str, tuple[float, ...]]:
    """A quantity over repeats: its median with its bracket, or why there is none; and the values."""
    got = metrics.collect(rs, quantity)
    if not got.values:
        return (got.missing[0].short if got.missing else "not run"), ()
    text = stats.estimate(got.values).text(show)
    if got.missing:
        text += f" ({len(got.values)} of {len(rs)} runs)"
    return text, got.values


def ratio_cell(a: tuple[float, ...], b: tuple[float, ...], test: bool) -> str:
    if not a or not b:
        return ""
    text = stats.ratio(a, b).text()
    return text + (f"; {stats.difference(a, b).text()}" if test else "")


def side_by_side(by_fw: dict[str, list[dict[str, Any]]]) -> str:
    """One column per framework (the reference first), then one ratio column per other framework."""
    fws = compared(by_fw)
    runs_of = [by_fw.get(fw, []) for fw in fws]
    blank = [""] * (len(fws) - 1)
    rows = []
    for name in SIDE_BY_SIDE:
        q = metrics.QUANTITIES[name]
        row = q.row
        assert row is not None          # every quantity named here has one (tests/test_quantities.py)
        cells = [cell(rs, name, row.cell) for rs in runs_of]
        ratios = [ratio_cell(cells[0][1], c[1], row.test) if row.ratio else "" for c in cells[1:]]
        rows.append([row.label, *(c[0] for c in cells), *ratios, q.better or ""])
    rows += [["parameters (total / trainable)", *[_parameters(x) for x in runs_of], *blank, ""],
             ["batch size: configured / observed in tensors", *[_batch(x) for x in runs_of], *blank, ""],
             ["training samples per epoch", *[cell(x, "train_samples_per_epoch", "{:,.0f}".format)[0]
                                               for x in runs_of], *blank, ""],
             ["repeats (figures are medians)", *[str(len(x)) for x in runs_of], *blank, ""]]
    return table(rows, ["", *(label(fw) for fw in fws), *(f"{label(REFERENCE)} / {label(fw)}" for fw in fws[1:]),
                        "better"])


def _parameters(rs: list[dict[str, Any]]) -> str:
    if not rs:
        return "not run"
    try:
        p = metrics.field(rs[0], "model.parameters")
        return f"{p['total']:,} / {p['trainable']:,}"
    except NotMeasured as exc:
        return exc.short


def _batch(rs: list[dict[str, Any]]) -> str:
    if not rs:
        return "not run"
    try:
        b = metrics.field(rs[0], "effective.batch_size")
    except NotMeasured as exc:
        return exc.short
    observed = f"{b['min']}" + (f"-{b['max']}" if b["max"] != b["min"] else "")
    return f"{b['configured']} / {observed}"


def memory_note(by_fw: dict[str, list[dict[str, Any]]]) -> str:
    """Where each framework's peak memory comes from, frameworks that share a source named together; the sources
    in full and how to compare them are in details.md."""
    by_source: dict[str, list[str]] = {}
    for fw in _ran(by_fw):
        by_source.setdefault(_source(by_fw[fw][0]), []).append(LABELS[fw])
    # a source's name comes before its parenthesised how-it-was-read, which details.md gives in full
    shown = "; ".join(f"{joined(fws)}: {md(short(src.split(' (')[0], 80))}" for src, fws in by_source.items())
    return f"Peak memory sources: {shown} ({explanations.link(explanations.MEMORY, 'in full, and how to compare')})."


def energy_note(by_fw: dict[str, list[dict[str, Any]]]) -> str:
    """How each framework's energy was read, or why it was not; frameworks read alike named together."""
    by_how: dict[str, list[str]] = {}
    for fw in _ran(by_fw):
        try:
            how = metrics.read(by_fw[fw][0], "energy_per_sample_j").source
        except NotMeasured as exc:
            how = exc.reason
        by_how.setdefault(how, []).append(LABELS[fw])
    return "Energy: " + "; ".join(f"{joined(fws)}: {md(how)}" for how, fws in by_how.items()) + "."


def memory_sources(by_fw: dict[str, list[dict[str, Any]]]) -> str:
    """details.md: each framework's peak memory source, in full."""
    return "\n".join(f"- {LABELS[fw]}: {md(_source(by_fw[fw][0]))}" for fw in _ran(by_fw))


def _ran(by: dict[str, Any]) -> list[str]:
    """The frameworks present in ``by``, the reference first (``compared`` names the reference even where absent)."""
    return [fw for fw in compared(by) if by.get(fw)]


def _source(r: dict[str, Any]) -> str:
    try:
        return metrics.read(r, "peak_memory_bytes").source
    except NotMeasured as exc:
        return exc.reason


def findings(by_variant: dict[str, dict[str, list[dict[str, Any]]]]) -> str | None:
    """What the run-time detectors saw in each run, and what each pair (the reference and another) differs in."""
    lines = []
    for variant in runs.variant_order(by_variant):
        fws = by_variant[variant]
        for fw in FRAMEWORKS:
            seen = set()
            for r in fws.get(fw, []):
                for f in r.get("findings", []):
                    if (f["code"], f["message"]) not in seen:
                        seen.add((f["code"], f["message"]))
                        declared = f" *Declared reproduction:* {md(f['declared'])}." if f.get("declared") else ""
                        lines.append(f"- {LABELS[fw]}, `{md(variant)}`: **{md(f['code'])}** ({f['severity']}): "
                                     f"{md(f['message'])}{declared}")
        for other in FRAMEWORKS[1:]:
            if REFERENCE not in fws or other not in fws:
                continue
            pair = fws[REFERENCE], fws[other]
            who = "both" if set(fws) == {REFERENCE, other} else f"{LABELS[REFERENCE]} and {LABELS[other]}"
            for f in (pair_findings.findings(pair[0][0], pair[1][0]) + pair_findings.co_load(*pair)
                      + pair_findings.flavors(*pair) + pair_findings.scripts(pair[0][0], pair[1][0])):
                lines.append(f"- {who}, `{md(variant)}`: **{f['code']}** ({f['severity']}): {md(f['message'])}")
    if not lines:
        return None
    return (f"What the detectors look at, and what a declared reproduction is: "
            f"{explanations.link(explanations.DETECTORS)}.\n\n" + "\n".join(lines))


def differences(by_fw: dict[str, list[dict[str, Any]]]) -> str:
    """Declared differences from the spec, then the device where the frameworks ran on different ones (every
    setting as each framework reported it is the settings table's: reprokit/report/settings_table.py)."""
    rows = []
    fws = compared(by_fw)
    any_run = next(iter(by_fw.values()))[0]
    for d in any_run["spec"].get("differences", []):     # a framework the spec gives no value: "not declared"
        if len({str(d.get(fw)) for fw in fws}) == 1:       # it sets apart a framework these runs do not hold
            continue
        rows.append([md(d["field"]), *(md(short(str(d.get(fw, "not declared")), 60)) for fw in fws),
                     md(short(d["why"]))])
    if all(by_fw.get(fw) for fw in fws):
        values = [by_fw[fw][0]["environment"].get("device_name") for fw in fws]
        if any(v != values[0] for v in values[1:]):
            rows.append(["device", *(md(v) for v in values), "as reported by each framework at run time"])
    return table(rows, ["what differs", *(label(fw) for fw in fws), "why / source"])


def posted_numerics(exp: Experiment | None, by_variant: dict[str, dict[str, list[dict[str, Any]]]]) -> str | None:
    """A named variant that ran each framework's own numerics defaults: what each framework reported, and
    where the posts' framework versions behaved otherwise than the pinned ones (the variant's ``era``)."""
    parts = []
    for variant, by_fw in by_variant.items():
        declared = (exp.variants.get(variant, {}) if exp else {})
        defaults = [k for k, v in (declared.get("numerics") or {}).items() if v == FRAMEWORK_DEFAULT]
        if not defaults and not declared.get("era"):
            continue
        read = "; ".join(f"{LABELS[fw]}: " + ", ".join(f"{DEFAULTABLE[key]} {_setting(rs[0]['environment'], key)}"
                                                        for key in defaults)
                         for fw, rs in sorted(by_fw.items(), key=lambda item: FRAMEWORKS.index(item[0]))
                         if defaults)
        text = [f"`{md(variant)}` ran each framework's own {' and '.join(DEFAULTABLE[d] for d in defaults)}, read "
                f"back at run time: {md(read)}." if defaults else f"`{md(variant)}`:"]
        text += [f"- {md(line)}" for line in declared.get("era", [])]
        parts.append("\n".join([text[0], *(["", "Where the posts' framework versions differed from the pinned "
                                            "ones:"] if len(text) > 1 else []), *text[1:]]))
    return "\n\n".join(parts) or None


def _setting(env: dict[str, Any], key: str) -> str:
    if key == "tf32":
        ops = pair_findings.tf32_apart(env).get("tf32_ops") or {}
        return ", ".join(f"{op} {'on' if ops[op] else 'off'}" for op in ("matmul", "convolution") if op in ops) \
            or "not reported"
    value = env.get(key)
    return "not reported" if value is None else ("on" if value else "off")


def model_sizes(published: dict[str, Any] | None, by_fw: dict[str, list[dict[str, Any]]]) -> str:
    spec = next(iter(by_fw.values()))[0]["spec"]
    ran = None if runs.is_script(spec) else parameter_counts.parameter_counts(spec["model"], spec["data"]["input_size"])
    if ran is None:         # a user's own model: its size is what the frameworks counted
        counted = ", ".join(f"{LABELS[fw]} {_parameters(by_fw[fw]).split(' / ')[0]}" for fw in _ran(by_fw))
        whose = "the scripts' own, as their optimizers stepped them" if runs.is_script(spec) else \
            "the experiment's own builders"
        return f"Model as run: {whose}; parameters as each framework counted them: {counted}."
    if published is None or spec["profile"] == "full":
        return f"Model as run: {ran['total']:,} parameters."
    full = parameter_counts.parameter_counts(published["model"], published["data"]["input_size"])
    if full is None:
        return f"Model as run ({spec['profile']} profile): {ran['total']:,} parameters."
    return (f"Model as run ({spec['profile']} profile): {ran['total']:,} parameters; the published setting's "
            f"model: {full['total']:,}.")


def probed(by_variant: dict[str, dict[str, list[dict[str, Any]]]]) -> str | None:
    """Each probed script: what ran, how it ended, every shim that changed its behaviour, one by one, and its notes
    (an error it raised after training); the observation hooks (which change nothing the script computes) once."""
    parts: list[str] = []
    hooks: list[str] = []
    for variant, by_fw in by_variant.items():
        for fw, rs in sorted(by_fw.items()):
            r = rs[0]
            if not runs.is_script(r["spec"]) or "probe" not in r:
                continue
            script, probe = r["spec"]["script"], r["probe"]
            syncs = probe.get("host_syncs") or {}
            line = (f"- {LABELS[fw]}, `{md(variant)}`: `python {md(' '.join([script['path'], *script['args']]))}` "
                    f"in its folder, unmodified; {md(probe['ended'])}. Its optimizers stepped "
                    f"{md(', '.join(probe.get('models') or []) or 'no model')}; host synchronisations in its own code: "
                    f"{syncs.get('per_training_step', 0):.2g} per training step ({md(syncs.get('meaning', ''))}). "
                    f"Declared shims (they change what it does):")
            parts.append("\n".join([line, *(f"  - {md(s)}" for s in probe["shims"]),
                                     *(f"  - **Note:** {md(n)}" for n in probe.get("notes") or [])]))
            hooks = hooks or probe["hooks"]
    if not parts:
        return None
    return ("\n".join(parts) + "\n\nThe probe's observation hooks, which change nothing the scripts compute:\n" +
            "\n".join(f"- {md(h)}" for h in hooks))


def environment(results: list[dict[str, Any]]) -> str:
    """One row per distinct environment (framework build, device, image or lock, code, data), with its runs."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in sorted(results, key=runs.order):
        if r["status"] == "ok":
            groups.setdefault(_environment_row(r), []).append(r)
    rows = [[*key[:1], str(len(rs)), md(short(", ".join(sorted({r["variant"] for r in rs})), 60)), *key[1:]]
            for key, rs in groups.items()]
    out = table(rows, ["framework", "runs", "variants", "version", "build", "Python", "device", "threads intra/inter",
                       "image or env", "lock sha256", "code commit", "data sha256"])
    return "\n\n".join([out, *_mixed_images(results)])


def _environment_row(r: dict[str, Any]) -> tuple[str, ...]:
    env, prov = r["environment"], r["provenance"]
    image = r.get("launcher", {}).get("image") or {}
    where = f"{image['ref']} ({image['id'][7:19]}; {_base(image)})" if image \
        else f"local: {prov.get('lock') or prov.get('interpreter') or '-'}"
    gpu = env.get("gpus") or []
    build = env.get("build") or {}
    threads = env.get("cpu_threads") or {}
    return (LABELS[r["framework"]], md(f"{env['framework']} {env['framework_version']}"),
            md(f"CUDA {build.get('cuda') or '-'}, cuDNN {build.get('cudnn') or '-'}"
               + (f", flavor {prov['flavor']}" if prov.get("flavor") else "")),
            md(env["python"]), md(env["device_name"] + (f", driver {gpu[0]['driver']}" if gpu else "")),
            md(f"{threads.get('intra_op', '-')}/{threads.get('inter_op', '-')}"), md(short(where, 100)),
            md((prov.get("lock_sha256") or "-")[:12]),
            md(prov["code_commit"][:12] + (" (dirty)" if prov["code_dirty"] else "")), md(prov["data_sha256"][:12]))


def _base(image: dict[str, Any]) -> str:
    # An image built from a local base without a digest label records none (base_digest null).
    digest = image.get("base_digest")
    if not digest:
        return "base unpinned, no digest"
    return f"base {digest[7:19]}{'' if image.get('base_pinned') else ', not pinned'}"


def _mixed_images(results: list[dict[str, Any]]) -> list[str]:
    """Results of one framework that came from different images (or environments) cannot be pooled blindly."""
    notes = []
    for fw in FRAMEWORKS:
        ids = {(r.get("launcher", {}).get("image") or {}).get("id") or r["provenance"].get("lock_sha256")
               for r in results if r["framework"] == fw and r["status"] == "ok"}
        if len(ids) > 1:
            notes.append(f"**Warning:** the {LABELS[fw]} results come from {len(ids)} different images or "
                         f"environments ({', '.join(md(str(i)[:19]) for i in sorted(map(str, ids)))}); "
                         f"figures pooled across them mix framework builds.")
    return notes


def failed(results: list[dict[str, Any]]) -> str | None:
    bad = [r for r in sorted(results, key=runs.order) if r["status"] != "ok"]
    if not bad:
        return None
    parts = []
    for r in bad:
        f = r["failure"]
        parts.append(f"- `{r['run_id']}` {md(r['experiment'])} / {LABELS[r['framework']]} / {md(r['variant'])} / "
                     f"repeat {r['repeat']}: **{f['kind']}**: {md(f['message'])}\n\n"
                     f"  <details><summary>log tail</summary>\n\n" + fenced(f["log_tail"][-15:]) + "\n\n  </details>")
    return "\n".join(parts)


def result_files(results: list[dict[str, Any]], plots: bool) -> str:
    where = ", plots included," if plots else ""
    listing = "\n".join(f"- [`{r['run_id']}.json`](results/{r['run_id']}.json): {md(r['experiment'])}, "
                        f"{LABELS[r['framework']]}, {md(r['variant'])}, repeat {r['repeat']}, {r['status']}"
                        for r in sorted(results, key=runs.order))
    return (f"Every figure in this report{where} is computed from these files in `results/`; `summary.csv` has "
            f"one row per run.\n\n<details><summary>{len(results)} result files</summary>\n\n{listing}\n\n</details>")

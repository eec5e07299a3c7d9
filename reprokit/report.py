"""The markdown report: reads result files only, never re-runs anything."""
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

from reprokit import architecture
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


def _summary(runs: list[dict]) -> dict:
    """One figure per quantity over a configuration's repeats (the median)."""
    last = [r["metrics"]["epochs"][-1] for r in runs]
    return {
        "repeats": len(runs),
        "samples_per_s": _median([r["timing"]["samples_per_s"] for r in runs]),
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
        row("throughput (samples/s, after warmup)", "samples_per_s", lambda v: _num(v, "{:,.1f}")),
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
    for r in sorted(results, key=lambda r: (r["experiment"], r["framework"], r["repeat"])):
        if r["status"] != "ok":
            continue
        env, prov = r["environment"], r["provenance"]
        image = prov.get("image") or {}
        rows.append([
            r["experiment"], LABEL[r["framework"]], r["repeat"],
            md(f"{env['framework']} {env['framework_version']}"),
            md(f"CUDA {env['build'].get('cuda') or '-'}, cuDNN {env['build'].get('cudnn') or '-'}"),
            md(env["python"]), md(env["device_name"]),
            md(f"{env['cpu_threads']['intra_op']}/{env['cpu_threads']['inter_op']}"),
            md(image.get("ref") or f"local: {prov.get('lock') or prov.get('interpreter') or '-'}"),
            md((prov.get("lock_sha256") or "-")[:12]),
            md(prov["code_commit"][:12] + (" (dirty)" if prov["code_dirty"] else "")),
            md(prov["data_sha256"][:12]),
        ])
    return tabulate(rows, headers=["experiment", "framework", "repeat", "version", "build", "Python", "device",
                                   "threads intra/inter", "image or env", "lock sha256", "code commit",
                                   "data sha256"], tablefmt="github")


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
    spec = next(iter(runs.values()))[0]["spec"]
    ran = architecture.parameter_counts(spec["model"], spec["data"]["input_size"])
    if exp is None or spec["profile"] == "full":
        return f"Model as run: {ran['total']:,} parameters."
    full = exp.resolved("full")
    published = architecture.parameter_counts(full["model"], full["data"]["input_size"])
    return (f"Model as run ({spec['profile']} profile): {ran['total']:,} parameters "
            f"(input {spec['data']['input_size']}x{spec['data']['input_size']}, "
            f"dataset `{spec['data']['dataset']}`); the full experiment's model: {published['total']:,} "
            f"parameters at {full['data']['input_size']}x{full['data']['input_size']} on "
            f"`{full['data']['dataset']}`.")


def render(name: str, results: list[dict], experiments: dict[str, Experiment]) -> str:
    ok = [r for r in results if r["status"] == "ok"]
    failed = [r for r in results if r["status"] != "ok"]
    out = [f"# Reproducibility report: {md(name)}", _banner(results)]
    by_exp: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in ok:
        by_exp[r["experiment"]][r["framework"]].append(r)
    for exp_name in sorted({r["experiment"] for r in results}):
        exp = experiments.get(exp_name)
        meta = exp.doc["experiment"] if exp else {"title": exp_name}
        out.append(f"## {md(meta['title'])}")
        if meta.get("question"):
            out.append(f"*Question:* {md(meta['question'])}" +
                       (f" (seed case `{meta['seed_case']}`)" if meta.get("seed_case") else ""))
        runs = by_exp.get(exp_name)
        if not runs:
            out.append("No run of this experiment finished; see *Failed runs*.")
            continue
        out.append(_model_sizes(exp, runs))
        out.append(_side_by_side({fw: _summary(rs) for fw, rs in runs.items()}))
        out.append(f"Peak memory source: {md(next(iter(runs.values()))[0]['memory']['source'])}. "
                   "A ratio above 1 means PyTorch's figure is larger.")
        out.append("### What differs between the two runs\n\n" + _differences(runs))
    out.append("## Environment and provenance\n\n" + (_environment(results) if ok else "No run finished."))
    if failed:
        out.append("## Failed runs")
        for r in failed:
            f = r["failure"]
            out.append(f"- `{r['run_id']}` {md(r['experiment'])} / {LABEL[r['framework']]} / repeat {r['repeat']}: "
                       f"**{f['kind']}**: {md(f['message'])}\n\n" + fenced(f["log_tail"][-15:]))
    out.append("## Result files\n\nEvery figure above is computed from these files in `results/`:\n\n" +
               "\n".join(f"- [`{r['run_id']}.json`](results/{r['run_id']}.json): {md(r['experiment'])}, "
                         f"{LABEL[r['framework']]}, {r['variant']}, repeat {r['repeat']}, {r['status']}"
                         for r in sorted(results, key=lambda r: (r["experiment"], r["framework"], r["repeat"]))))
    return "\n\n".join(out) + "\n"


def write(report_dir: Path, name: str, results: list[dict], experiments: dict[str, Experiment]) -> Path:
    path = report_dir / "report.md"
    path.write_text(render(name, results, experiments))
    return path

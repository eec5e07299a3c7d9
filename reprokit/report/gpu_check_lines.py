"""The lines scripts/gpu_check prints from result files: each run's key figures (device identity, numerics,
throughput, energy, every phase's memory peaks, the MFU's peak), PyTorch as posted against fixed, a tuned run's
settings as read back. Pure formatting of result dicts: the check itself (reprokit/gpu_check) runs and judges.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reprokit.kits.contract.names import label
from reprokit.results import utilisation


def mib(b: float | None) -> str:
    return "n/a" if b is None else f"{b / 2**20:,.0f} MiB"


def figure(x: Any, fmt: str = "{:.3f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def identity_ok(r: dict[str, Any]) -> bool:
    """The NVML sampler watched the very device the framework used (CUDA UUID = NVML UUID minus its prefix)."""
    env = r.get("environment") or {}
    watched: str | None = (env.get("nvml") or {}).get("uuid")
    used: str | None = env.get("device_uuid")
    return bool(watched and used and watched.split("-", 1)[1] == used.removeprefix("GPU-").removeprefix("MIG-"))


def key_figures(path: Path) -> str:
    r = json.loads(path.read_text())
    head = f"{path.name}  {r['experiment']} / {r['framework']} / {r['variant']} / repeat {r['repeat']}: {r['status']}"
    lines = [head]
    launcher = r.get("launcher", {})
    if r["status"] != "ok":
        f = r.get("failure") or {}
        wall = figure(launcher.get('wall_s'), '{:.1f}')
        lines.append(f"  FAILED ({f.get('kind')}): {f.get('message')}  [launcher {wall} s]")
        lines += ["  | " + line for line in (f.get("log_tail") or [])[-8:]]
        return "\n".join(lines)
    env, t, mem, eff = r["environment"], r["timing"], r["memory"], r["effective"]
    gpu = (env.get("gpus") or [{}])[0]
    build = env.get("build", {})
    lines.append(f"  device {env.get('device')}: {env.get('device_name')}"
                 + (f" (driver {gpu.get('driver')}, {gpu.get('memory_mib')} MiB)" if gpu else "")
                 + f"; {env.get('framework')} {env.get('framework_version')}, CUDA {build.get('cuda')}, "
                 f"cuDNN {build.get('cudnn')}, Python {env.get('python')}, numpy {env.get('numpy')}; interpreter "
                 f"{r['provenance'].get('interpreter') or launcher.get('python')}")
    ops, threads = env.get("tf32_ops") or {}, env.get("cpu_threads") or {}
    asked = r["spec"].get("numerics") or {"tf32": "the script's", "cudnn_autotune": "the script's",
                                          "cpu_threads": {"intra_op": "the script's", "inter_op": "the script's"}}
    lines.append(f"  numerics as the framework reported them: TF32 matmul {ops.get('matmul')}, convolution "
                 f"{ops.get('convolution')} (spec: {asked['tf32']}); cuDNN autotuning {env.get('cudnn_autotune')} "
                 f"(spec: {asked['cudnn_autotune']}); threads {threads.get('intra_op')}/{threads.get('inter_op')} "
                 f"(spec: {asked['cpu_threads']['intra_op']}/{asked['cpu_threads']['inter_op']})")
    read = env.get("settings") or {}
    lines.append("  settings read back: " + ("; ".join(
        f"{key} {v['value']}" if v.get("value") is not None else f"{key} not reported"
        for key, v in read.items()) or "none recorded"))
    if "probe" in r:
        probe = r["probe"]
        lines.append(f"  probe: {probe['ended']}; its own code {probe['own_seconds_per_step'] * 1e6:,.0f} us per "
                     f"measured step; host syncs per training step {probe['host_syncs']['per_training_step']:.2g}; "
                     f"models stepped {', '.join(probe['models'])}; shims: {'; '.join(probe['shims'])}")
    steps = t.get("step_s", {})
    epochs = t.get("epochs", [])
    lines.append(f"  throughput {figure(t.get('samples_per_s'), '{:,.1f}')} samples/s after {t.get('warmup_steps')} "
                 f"warmup steps; step p50 {figure(steps.get('p50') and steps['p50'] * 1e3, '{:.1f}')} ms, "
                 f"p95 {figure(steps.get('p95') and steps['p95'] * 1e3, '{:.1f}')} ms; epochs train/eval "
                 + ", ".join(f"{e['train_s']:.1f}/{e['eval_s']:.1f} s" for e in epochs)
                 + f"; data-wait {figure(t.get('data_wait_fraction'), '{:.1%}')}")
    energy = t.get("energy") or {}
    lines.append(f"  energy over the timed window: {figure(energy.get('joules'), '{:,.1f}')} J, "
                 f"{figure(energy.get('joules_per_sample'), '{:.4g}')} J/sample, "
                 f"mean {figure(energy.get('mean_watts'), '{:.0f}')} W ({energy.get('method') or 'no reading recorded'}"
                 + (f"; not measured: {energy['why_not']}" if energy.get("why_not") else "") + ")")
    fw = mem.get("framework", {})
    lines.append(f"  memory peak {mib(mem.get('peak_bytes'))} ({mem.get('source')})"
                 + (f"; reserved {mib(fw['peak_reserved'])}" if fw.get("peak_reserved") else "")
                 + f"; warmup's own peak {mib(mem.get('warmup_peak_bytes'))}")
    lines += phase_lines(mem)
    last = r["metrics"]["epochs"][-1]
    bs = eff["batch_size"]
    lines.append(f"  batch {bs['configured']} (observed {bs['min']}-{bs['max']}), steps/epoch "
                 f"{eff['train_steps_per_epoch']}, test samples {eff['test_samples']}; final train acc "
                 f"{figure(last['train_accuracy'])} loss {figure(last['train_loss'])}, test acc "
                 f"{figure(last['test_accuracy'])} loss {figure(last['test_loss'])}")
    lines.append(f"  parameters {r['model']['parameters']['total']:,}; wall: kit {t['wall_s']:.1f} s, "
                 f"process {figure(launcher.get('wall_s'), '{:.1f}')} s")
    top, source = utilisation.peak(r)
    lines.append(f"  MFU peak: {figure(top and top / 1e12, '{:,.1f}')} TFLOP/s ({source})")
    if env.get("device") == "gpu":
        nvml = env.get("nvml") or {}
        events = nvml.get("clock_events") or {}
        slowdowns = {k: v for k, v in (events.get("slowdown_samples") or {}).items() if v} or "none"
        power = {k: v for k, v in (events.get("power_samples") or {}).items() if v} or "none"
        lines.append(f"  device identity: {'OK' if identity_ok(r) else 'MISMATCH'}: torch's device "
                     f"{env.get('device_uuid')}, NVML watched {nvml.get('uuid')} "
                     f"({nvml.get('found_by') or nvml.get('unavailable')}); clock-event samples "
                     f"{events.get('samples')}, slowdowns {slowdowns}, power management {power}")
    return "\n".join(lines)


def phase_lines(mem: dict[str, Any]) -> list[str]:
    """Every phase's peaks, each reading with its source: counters reset at the phase's start, read at its end."""
    phases = mem.get("phases")
    if not phases:
        return ["  phase peaks: not measured (a result without memory.phases)"]
    sources = {name: got["source"] for p in phases for name, got in p["readings"].items()}
    out = [f"  phase peaks ({', '.join(f'{name}: {src}' for name, src in sources.items())}):"]
    for p in phases:
        readings = ", ".join(f"{name} {mib(got['peak_bytes'])}" for name, got in p["readings"].items())
        out.append(f"    epoch {p['epoch']} {p['phase']:<6} {p['steps']:>4} steps: {readings}")
    return out


def variant_lines(results: list[dict[str, Any]]) -> list[str]:
    """Seed by seed, a framework's as posted against its fixed (those that ran as posted): throughput, step
    time, and the phase peaks."""
    out = []
    posted = {r["framework"] for r in results if r["variant"] == "as_posted"}
    ok = [r for r in results if r["status"] == "ok" and r["framework"] in posted]
    for experiment, framework in sorted({(r["experiment"], r["framework"]) for r in ok}):
        runs = {r["variant"]: r for r in ok if (r["experiment"], r["framework"]) == (experiment, framework)}
        for variant in ("fixed", "as_posted", *sorted(v for v in runs if v.startswith("+"))):
            r = runs.get(variant)
            if r is None:
                continue
            t, base = r["timing"], runs.get("fixed", r)["timing"]
            peaks = {p: max((x["peak_bytes"] or 0 for x in r["memory"].get("phases", []) if x["phase"] == p),
                            default=None) for p in ("warmup", "train", "eval")}
            out.append(f"  {experiment:<26} {label(framework)} {variant:<26} {t['samples_per_s']:9,.1f} samples/s "
                       f"({t['samples_per_s'] / base['samples_per_s']:.2f}x fixed), step p50 "
                       f"{figure(t['step_s'].get('p50') and t['step_s']['p50'] * 1e3, '{:.1f}')} ms; peaks warmup / "
                       f"train / eval {' / '.join(mib(v) for v in peaks.values())}")
    return out


def tuned_line(r: dict[str, Any]) -> str:
    """A tuned part's run: its throughput, and the precision, execution and data layout the framework read back."""
    settings = r.get("environment", {}).get("settings", {})
    read = "; ".join(f"{k} {(settings.get(k) or {}).get('value')}" for k in ("precision", "execution",
                                                                             "data_layout", "cudnn_autotune"))
    return (f"{r['variant']:<24} {r['status']:<6} {figure(r.get('timing', {}).get('samples_per_s'), '{:.0f}')} "
            f"samples/s; read back: {read}; loss scale "
            f"{r.get('environment', {}).get('precision', {}).get('loss_scale')}")

"""The check after its bootstrap: the plan with its estimate, the timed runs (`reprokit reproduce`), the scripts
under the probe, the evidence printed after them (key figures, as posted against fixed, mixed precision, the
warmup twin, the certificate's half, the kit's cost), the untimed parts, the report, and the verdict: the time
against its target and every gate, as the exit status.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from reprokit import cli
from reprokit.environments import host_checks
from reprokit.errors import UserError
from reprokit.gpu_check import Options, data_dir, reports_dir, say
from reprokit.gpu_check.plan import TARGET_S, gpu_plan, reproduce_command
from reprokit.gpu_check.probed_scripts import corpus_script, model_on_cpu, probed_script
from reprokit.gpu_check.ranks_check import ranks_on_one_device
from reprokit.gpu_check.reruns import certificate_half, kit_cost, warmup_twin
from reprokit.gpu_check.tuned_and_jax import TUNED_EXPERIMENT, jax_part, tuned_part
from reprokit.report.gpu_check_lines import figure, identity_ok, key_figures, variant_lines


def mixed_precision_line(cpu_dry_run: bool) -> str:
    """Which mixed precision tuned gets here: bf16 from compute capability 8.0, fp16 with loss scaling from 7.0,
    below that refused in one sentence."""
    if cpu_dry_run:
        return ("mixed precision check: no GPU in a CPU dry run (bf16 from compute capability 8.0, fp16 with loss "
                "scaling from 7.0)")
    try:
        host_checks.check_precision({"fp16_mixed"}, "all")
    except UserError as exc:
        return f"mixed precision check: refused before any run: {exc}"
    gpus = ", ".join(f"{g['name']} ({g.get('compute_capability')})" for g in host_checks.resolve_gpus("all"))
    return f"mixed precision check: tuned gets {host_checks.mixed_precision('all')} on {gpus}"


def evidence(args: Options, report_dir: Path, paths: list[Path], results: list[dict[str, Any]],
             data_dir: Path) -> tuple[list[str], list[str], float]:
    """Everything printed after the runs; returns the warmup twin's and the kit cost's misses, and the seconds
    the kit cost took (apart from the target)."""
    on_gpu = not args.cpu_dry_run
    say(f"\n== result files ({report_dir / 'results'}), key figures")
    for path in paths:
        say(key_figures(path))
    say("\n== PyTorch as posted against fixed (seed 000: per-step sync, blocking copies, the CPU loader; "
        "seed 004: outputs kept alive, validation with gradients), and the peaks of each phase")
    for line in variant_lines(results):
        say(line)
    say(mixed_precision_line(not on_gpu))
    say("\n== every evaluation shape warmed up: the memory case against its twin with a full last batch")
    twin_missed = warmup_twin(args.python, results, data_dir, args.state_dir.resolve() / "twin", args.timeout)
    for miss in twin_missed:
        say(f"  MISSED: {miss}")
    say("\n== the certificate's PyTorch half at the timed size (structure: build, trace, FLOPs, fp32 logits)")
    for line in certificate_half(args.python, results, data_dir, args.state_dir.resolve() / "certificate-half",
                                 args.timeout):
        say(line)
    say("\n== the kit against its bare loop on this device (one fixed spec per experiment; reprokit.kits.bench, as in "
        "`nox -s bench`; not part of the time target)")
    t_cost = time.monotonic()
    missed = kit_cost(args.python, results, data_dir, args.state_dir.resolve() / "kit-cost", args.timeout)
    for miss in missed:
        say(f"  MISSED: {miss}")
    return twin_missed, missed, time.monotonic() - t_cost


def host_builds_line() -> str:
    """Which build of each framework this host's driver gets where the kit builds the environment (Docker, or
    its own virtualenvs); this check itself runs the box's own torch."""
    try:
        chosen = host_checks.gpu_flavors({"pytorch", "tensorflow"}, "all")
    except UserError as exc:
        return f"GPU builds: none of them runs here: {exc}"
    return "GPU builds for this driver: " + "; ".join(f"{fw} {f.name} (CUDA {f.cuda}): {f.why}"
                                                      for fw, f in sorted(chosen.items()))


def main(args: Options, extra: list[str], plan_for: str, started: float, host_modules: tuple[str, ...],
         optional_modules: dict[str, str]) -> int:
    """The check, once scripts/gpu_check parsed its command line and found the host packages: ``extra`` goes to
    `reprokit reproduce` as is, ``plan_for`` is the GPU the plan is estimated for (the one torch sees, else
    --gpu-name), ``started`` when the check began (its time counts against the target)."""
    on_gpu = not (args.cpu_dry_run or args.plan_only)
    estimated = gpu_plan(args, extra, plan_for, host_modules, optional_modules)
    if args.plan_only:
        return 0
    if on_gpu:
        say(host_builds_line())
    cmd = reproduce_command(args, extra, on_gpu)
    say(("\n== CPU dry run: the same path at the quick profile, on this CPU\n" if not on_gpu else "\n")
        + "$ python -m reprokit " + " ".join(cmd) + "\n")
    code = cli.main(cmd)

    report_dir = reports_dir(args, extra) / args.name
    paths = sorted((report_dir / "results").glob("*.json"))
    results = [json.loads(p.read_text()) for p in paths]
    script_missed = (probed_script(args, extra, on_gpu) + corpus_script(args, extra, on_gpu)
                     + model_on_cpu(args, extra, on_gpu) + ranks_on_one_device(args, extra, on_gpu))
    twin_missed, cost_missed, cost_s = evidence(args, report_dir, paths, results, data_dir(extra))
    twin_missed += script_missed
    say(f"\n== PyTorch's tuned variant on {TUNED_EXPERIMENT} (not part of the time target)")
    tuned_missed: list[str] = []
    tuned_s = 0.0
    if args.no_tuned:
        say("  left out (--no-tuned)")
    else:
        tuned_missed, tuned_s = tuned_part(args, extra, on_gpu)
    twin_missed += tuned_missed
    cost_s += tuned_s
    say("\n== the JAX kit on the same cases, where JAX is installed (not part of the time target)")
    jax_missed, jax_s = jax_part(args, extra, on_gpu)
    twin_missed += jax_missed
    cost_s += jax_s
    report = report_dir / "report.md"
    if report.exists():
        say(f"\n== {report}\n")
        say(report.read_text())
    elapsed = time.monotonic() - started - cost_s
    late = elapsed > TARGET_S and on_gpu
    strangers = [r["run_id"] for r in results if r["status"] == "ok" and on_gpu and not identity_ok(r)]
    if strangers:
        say(f"gpu_check: the NVML sampler did not watch the framework's own device in {', '.join(strangers)}")
    say(f"gpu_check: {len(paths)} result file(s), exit {code}, {elapsed:.0f} s in all (estimated "
        f"{figure(estimated, '{:.0f}')} s; target < {TARGET_S:.0f} s on one GPU{'; MISSED' if late else ''}"
        f"{'; CPU dry run: the time says nothing about a GPU' if not on_gpu else ''}); warmup twin: "
        f"{'; '.join(twin_missed) or 'ok'}; the kit against its bare loop: {cost_s:.0f} s more, "
        f"{len(cost_missed)} gate(s) missed")
    if code == 2:
        return 2
    return 1 if code or late or not results or strangers or cost_missed or twin_missed else 0

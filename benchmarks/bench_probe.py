"""What the probe costs a user's script: its whole step, the same script run plain and under the probe.

    PYTHONPATH=. python benchmarks/bench_probe.py [--rounds 12] [--steps 60] [--frameworks pytorch,tensorflow,jax]
        [--scripts NAME,...] [--small] [--json OUT]

benchmarks/probe_scripts/ holds training scripts of the quick profile's size of model that time their own steps
after 5 warmup steps, one per loop kind: a PyTorch DataLoader loop in the process, one with 2 worker processes
and shuffling, and DistributedDataParallel over 2 ranks started with mp.spawn (each rank prints its own steps, is
held against its plain twin, and a round stands for its worst rank); a Keras loop over tf.data with a tf.function
step, and `model.fit` on numpy arrays with Keras's default batch; a JAX loop of a jitted optax step, as JAX's
examples write it. Each round runs a script once plain (`python SCRIPT`, in the framework's real environment) and
once under the probe (`python -m reprokit.kits.probe`, through the local runner, with the full profile's bounds: none),
in fresh processes, in alternating order.

The gated figure is the whole step: the probed step's time against the plain one's, by the script's own clock,
paired within a round. Where the script's steps each have a time (a loop whose step returns when its work is done,
as PyTorch's and TensorFlow's do on a CPU), a process's step is the mean of its middle half of steps, so that a
burst of another process on this shared machine does not stand for the step; JAX dispatches its steps ahead and
only the whole loop has a time, its mean. Gate: the median over the rounds at most 1%, its order-statistic
interval (reprokit/results/stats.py, as in the reports) printed beside it. The probe's own code on the script's
path, measured inside the probed process (reprokit/kits/measurement/hook_clock.HookClock: every hook, count and
bookkeeping between the script's steps), is printed and gated too: the top of its bracket at most 1% of the plain step.
The machine's load average is printed with each round: on a loaded machine a process pays for it in its whole steps.

`--small`: the form the test suite runs (tests/test_bench_small.py): one round of a few steps, no warm-up round,
printed and not judged.

Exit status: 0 when every gate holds (or --small), 1 when one misses, 2 on a setup error.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from reprokit.environments.envs import ENVS
from reprokit.execute import data_step
from reprokit.kits.contract.spec import ScriptSpec
from reprokit.plan.experiments import from_scripts
from reprokit.plan.plan import Options
from reprokit.plan.script_plan import specs_for
from reprokit.results import stats
from reprokit.results.provenance import code
from reprokit.runners.base import KitCall, spec_call
from reprokit.runners.local import LocalRunner

SCRIPTS = Path(__file__).parent / "probe_scripts"
# Per framework, its loop kinds: (script, what its loop is)
LOOPS = {"pytorch": (("torch_timed.py", "DataLoader loop"), ("torch_workers_timed.py", "DataLoader, 2 workers"),
                     ("torch_ddp_timed.py", "DDP, 2 ranks, mp.spawn")),
         "tensorflow": (("keras_timed.py", "tf.function loop"), ("keras_fit_timed.py", "Keras fit")),
         "jax": (("jax_timed.py", "jax.jit loop"),)}
GATE = 0.01
SMALL_STEPS = 8


def middle_mean(values: list[float]) -> float:
    """The mean of the middle half of ``values`` (the interquartile mean): robust to the slowest and fastest
    quarter, which on a shared machine are another process's bursts, while a cost that every step pays stays."""
    xs = sorted(values)
    cut = len(xs) // 4
    kept = xs[cut:len(xs) - cut]
    return sum(kept) / len(kept)


Step = tuple[float, float]      # a process's step: (wall seconds, CPU seconds)


def step_seconds(line: str) -> Step:
    """A process's step by the wall clock and by its CPU clock, from its BENCH line: ``steps``; ``starts``, each
    timed step's start and the end of the last (or only the loop's start and end, where its steps have no times of
    their own); ``cpu``, the process's CPU time at the loop's start and end (read once at each: with a framework's
    threads at work a read can take a millisecond). Wall: the middle mean of the steps' times, else the loop's
    mean; CPU: the loop's mean."""
    got = json.loads(line[len("BENCH "):])
    starts, (cpu0, cpu1), steps = got["starts"], got["cpu"], got["steps"]
    wall = middle_mean([b - a for a, b in zip(starts, starts[1:])]) if len(starts) > 2 else \
        (starts[-1] - starts[0]) / steps
    return wall, (cpu1 - cpu0) / steps


def rank_steps(lines: list[str]) -> dict[int, Step]:
    """Each process's step from its BENCH line, by its rank (a script of one process prints one line: rank 0)."""
    got: dict[int, Step] = {}
    for line in lines:
        if line.startswith("BENCH "):
            got[json.loads(line[len("BENCH "):]).get("rank", 0)] = step_seconds(line)
    if not got:
        raise RuntimeError("the script printed no BENCH line:\n" + "\n".join(lines[-20:]))
    return got


def plain(python: Path, script: Path) -> dict[int, Step]:
    # the environment the local runner gives the probed side (BENCH_STEPS included), the script's own folder
    proc = subprocess.run([str(python), script.name], cwd=script.parent, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"{script.name} failed plain:\n{proc.stderr[-2000:]}")
    return rank_steps(proc.stdout.splitlines())


def probed(runner: LocalRunner, spec: ScriptSpec, work: Path) -> tuple[dict[int, Step], dict[int, float]]:
    """Each of the probed script's processes' step by its own clocks, and the probe's own code's seconds per step
    in each (probe.own_seconds_per_step; a run of several ranks has each one's in ``processes``)."""
    spec_path = work / "spec.json"
    written = spec.to_dict()
    spec_path.write_text(json.dumps(written))
    call = spec_call(written, spec_path, work / "out", runner.data_dir)
    outcome = runner.run(KitCall(call.framework, call.module, call.args, output=call.output, inputs=call.inputs,
                                 timeout_s=600, label="bench-probe"), lambda event: None)
    if outcome.exit_code != 0:
        raise RuntimeError(f"{spec.script.path} failed under the probe:\n" + "\n".join(outcome.log_tail[-20:]))
    result = json.loads((call.output / "result.json").read_text())
    each = (result.get("processes") or {}).get("each")
    own = ({e["index"] or 0: e["probe_own_seconds_per_step"] for e in each} if each else
           {0: result["probe"]["own_seconds_per_step"]})
    return rank_steps(outcome.log_tail), own


def bench(framework: str, name: str, loop: str, rounds: int, work: Path, warm: bool = True) -> dict:
    """``rounds`` rounds of the script plain and probed (after a warm round, dropped, where ``warm``)."""
    script = SCRIPTS / name
    runner = LocalRunner(ENVS, work / "data", "cpu")
    runner.prepare({framework})
    python = runner.python_of(framework)
    opts = Options(profile="full", device="cpu", repeats=1, frameworks=(framework,),
                   data=data_step.Preparing(work / "data", allow_download=False), dataset="learnable")
    exp = from_scripts("bench", {framework: script})
    (spec,) = specs_for(exp.name, exp.scripts, opts, runner.describe, code())
    m: dict = {"framework": framework, "script": name, "loop": loop, "shares": [], "costs_us": [], "plain_ms": [],
               "cpu_shares": [], "own_us": [], "own_shares": [], "load": []}
    for r in range(0 if warm else 1, rounds + 1):            # round 0 warms the page cache: dropped
        order = ("plain", "probed") if r % 2 else ("probed", "plain")
        got = {side: plain(python, script) if side == "plain" else probed(runner, spec, work) for side in order}
        if r == 0:
            continue
        (steps, owns), bases = got["probed"], got["plain"]
        if set(steps) != set(bases):
            raise RuntimeError(f"{name}: ranks {sorted(bases)} plain but {sorted(steps)} under the probe")
        # each rank against its plain twin; the round stands for its worst rank, which the gate then holds
        rank = max(bases, key=lambda k: steps[k][0] / bases[k][0])
        (wall, cpu), (base, base_cpu), own = steps[rank], bases[rank], max(owns.values())
        m["shares"].append(wall / base - 1)
        m["costs_us"].append((wall - base) * 1e6)
        m["plain_ms"].append(base * 1e3)
        m["cpu_shares"].append(cpu / base_cpu - 1)
        m["own_us"].append(own * 1e6)
        m["own_shares"].append(own / min(b for b, _ in bases.values()))
        m["load"].append(os.getloadavg()[0])
        m["ranks"] = len(bases)
        worst = f" (rank {rank}, the worst of {len(bases)})" if len(bases) > 1 else ""
        print(f"  {framework:<10} {loop:<22} round {r}{worst} [{', '.join(order)}]: plain {base * 1e3:.2f} ms/step, "
              f"probed {wall * 1e3:.2f} ms/step ({m['shares'][-1]:+.2%}; CPU time {m['cpu_shares'][-1]:+.2%}); "
              f"the probe's own code {own * 1e6:.0f} us/step ({m['own_shares'][-1]:.3%}); load average "
              f"{m['load'][-1]:.1f}", flush=True)
    return m


def summary(m: dict) -> tuple[list[str], bool]:
    """The whole step probed against plain (gate: the median), its CPU time beside it, and the probe's own code
    (gate: its bracket's top)."""
    share, cost, step = stats.estimate(m["shares"]), stats.estimate(m["costs_us"]), stats.estimate(m["plain_ms"])
    cpu, own, own_share = stats.estimate(m["cpu_shares"]), stats.estimate(m["own_us"]), stats.estimate(m["own_shares"])
    whole_ok, own_ok = share.median <= GATE, own_share.high <= GATE
    rounds = _rounds(len(m["shares"]))
    return ([f"  {m['framework']:<10} {m['loop']:<22} whole step, probed against plain: {share.text('{:+.2%}'.format)}"
             f", {cost.text('{:+.0f} us'.format)} of a {step.median:.2f} ms step, over {rounds}; gate (the median) "
             f"<= {GATE:.0%}: {'ok' if whole_ok else 'MISSED'}",
             f"  {'':<33} its CPU time, probed against plain: {cpu.text('{:+.2%}'.format)}; load average "
             f"{min(m['load']):.1f}-{max(m['load']):.1f}",
             f"  {'':<33} the probe's own code: {own.text('{:.0f} us'.format)} per step, "
             f"{own_share.text('{:.3%}'.format)}; gate (the bracket's top) <= {GATE:.0%}: "
             f"{'ok' if own_ok else 'MISSED'}"],
            whole_ok and own_ok)


def _rounds(n: int) -> str:
    return f"{n} round{'s' if n != 1 else ''}"


def table(measured: list[dict]) -> list[str]:
    """One row per framework and loop kind, in Markdown: the whole step's cost, its CPU time's, the probe's own."""
    rows = ["| framework | loop | plain step | whole step, probed against plain | its CPU time | probe's own code "
            "| rounds | load average |", "|---|---|---|---|---|---|---|---|"]
    for m in measured:
        share, cpu, own = (stats.estimate(m[key]) for key in ("shares", "cpu_shares", "own_shares"))
        rows.append(f"| {m['framework']} | {m['loop']} ({m['script']}) | {stats.estimate(m['plain_ms']).median:.2f} ms "
                    f"| {share.text('{:+.2%}'.format)} | {cpu.text('{:+.2%}'.format)} | {own.text('{:.2%}'.format)} "
                    f"| {len(m['shares'])} | {min(m['load']):.1f}-{max(m['load']):.1f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/bench_probe.py", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--frameworks", default=",".join(LOOPS))
    p.add_argument("--scripts", help="only these scripts of benchmarks/probe_scripts/, comma-separated")
    p.add_argument("--small", action="store_true", help=f"one round of {SMALL_STEPS} steps, printed, not judged")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    frameworks = args.frameworks.split(",")
    unknown = [fw for fw in frameworks if fw not in LOOPS]
    if unknown:
        raise RuntimeError(f"no probe scripts for {', '.join(unknown)}: name some of {', '.join(LOOPS)}")
    chosen = [(fw, name, loop) for fw in frameworks for name, loop in LOOPS[fw]
              if not args.scripts or name in args.scripts.split(",")]
    if not chosen:
        names = ", ".join(name for fw in frameworks for name, _ in LOOPS[fw])
        raise RuntimeError(f"--scripts {args.scripts} names none of the scripts of {args.frameworks}: {names}")
    rounds, steps = (1, SMALL_STEPS) if args.small else (args.rounds, args.steps)
    os.environ["BENCH_STEPS"] = str(steps)          # both sides' scripts read it
    print(f"== the probe's cost: each script's whole step plain and under the probe, every observation on "
          f"({_rounds(rounds)} of {steps} steps; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)",
          flush=True)
    measured = []
    with tempfile.TemporaryDirectory(prefix="reprokit-bench-probe-") as tmp:
        for fw, name, loop in chosen:
            measured.append(bench(fw, name, loop, rounds, Path(tmp) / Path(name).stem, warm=not args.small))
    print("== summary" + (" (small form: printed, not judged)" if args.small else ""))
    ok = True
    for m in measured:
        lines, passed = summary(m)
        print("\n".join(lines))
        ok &= passed
    print("\n".join(table(measured)))
    if args.json:
        args.json.write_text(json.dumps(measured, indent=1))
    return 0 if ok or args.small else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as exc:
        print(f"bench_probe: {exc}", file=sys.stderr)
        sys.exit(2)

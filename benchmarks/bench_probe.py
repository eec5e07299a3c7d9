"""What the probe costs a user's script: the same script plain and under the probe, every observation on.

    PYTHONPATH=. python benchmarks/bench_probe.py [--rounds 12] [--steps 60] [--frameworks pytorch,tensorflow]
        [--json OUT]

benchmarks/probe_scripts/ holds two PyTorch and two Keras training scripts (the quick profile's size of
model) that time their own steps, after 5 warmup steps, and print the seconds per step: a DataLoader loop in
the process and one with 2 worker processes and shuffling, as the tutorials write it; a tf.data loop with a
tf.function step, and `model.fit` on numpy arrays with Keras's default batch, as the beginner tutorial calls it.
Each round runs the script once plain (`python SCRIPT`, in
the framework's real environment) and once under the probe (`python -m kits.probe`, through the local
runner, with the full profile's bounds: none), in fresh processes, in alternating order. A round's cost is
the probed step's time minus the plain one's, in microseconds and as a share of the plain step; the rounds'
median and its order-statistic interval (reprokit/results/stats.py, as in the reports) are printed. That
difference carries each fresh process's own bias (on this project's 2-core VM, whole steps differ by 5-30%
between processes of the same code), so the gated figure is the probe's own time on the script's path,
measured inside the probed process (kits/observation/observe.HookClock: every hook, count and bookkeeping it
runs between the script's steps): gate, the top of its bracket at most 1% of the plain step.

Exit status: 0 when every gate holds, 1 when one misses, 2 on a setup error.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kits.contract.spec import ScriptSpec
from reprokit.environments.envs import ENVS
from reprokit.execute import data_step
from reprokit.plan.experiments import from_scripts
from reprokit.plan.plan import Options
from reprokit.plan.script_plan import specs_for
from reprokit.results import stats
from reprokit.results.provenance import code
from reprokit.runners.base import KitCall, spec_call
from reprokit.runners.local import LocalRunner

SCRIPTS = Path(__file__).parent / "probe_scripts"
# Per framework: a loop over a loader in the process, then the tutorials' forms (loader workers; fit on arrays).
FILES = {"pytorch": ("torch_timed.py", "torch_workers_timed.py"),
         "tensorflow": ("keras_timed.py", "keras_fit_timed.py")}
GATE = 0.01


def _seconds(lines: list[str]) -> float:
    line = next(x for x in reversed(lines) if x.startswith("BENCH "))
    return json.loads(line[len("BENCH "):])["s_per_step"]


def plain(python: Path, script: Path) -> float:
    # the environment the local runner gives the probed side (BENCH_STEPS included), the script's own folder
    proc = subprocess.run([str(python), script.name], cwd=script.parent, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"{script.name} failed plain:\n{proc.stderr[-2000:]}")
    return _seconds(proc.stdout.splitlines())


def probed(runner: LocalRunner, spec: ScriptSpec, work: Path) -> tuple[float, float]:
    """The probed script's seconds per step by its own clock, and the probe's own code's
    (probe.own_seconds_per_step)."""
    spec_path = work / "spec.json"
    written = spec.to_dict()
    spec_path.write_text(json.dumps(written))
    call = spec_call(written, spec_path, work / "out", runner.data_dir)
    outcome = runner.run(KitCall(call.framework, call.module, call.args, output=call.output, inputs=call.inputs,
                                 timeout_s=600, label="bench-probe"), lambda event: None)
    if outcome.exit_code != 0:
        raise RuntimeError(f"{spec.script.path} failed under the probe:\n" + "\n".join(outcome.log_tail[-20:]))
    own = json.loads((call.output / "result.json").read_text())["probe"]["own_seconds_per_step"]
    return _seconds(outcome.log_tail), own


def bench(framework: str, name: str, rounds: int, work: Path) -> dict:
    script = SCRIPTS / name
    runner = LocalRunner(ENVS, work / "data", "cpu")
    runner.prepare({framework})
    python = runner.python_of(framework)
    opts = Options(profile="full", device="cpu", repeats=1, frameworks=(framework,),
                   data=data_step.Preparing(work / "data", allow_download=False), dataset="learnable")
    exp = from_scripts("bench", {framework: script})
    (spec,) = specs_for(exp.name, exp.scripts, opts, runner.describe, code())
    spec = dataclasses.replace(spec, measure=dataclasses.replace(spec.measure, memory_every_steps=5))
    m = {"framework": framework, "script": name, "own_us": [], "own_shares": [], "costs_us": [], "shares": [],
         "plain_ms": []}
    for r in range(rounds + 1):                          # round 0 warms the page cache: dropped
        order = ("plain", "probed") if r % 2 else ("probed", "plain")
        got = {side: plain(python, script) if side == "plain" else probed(runner, spec, work) for side in order}
        if r == 0:
            continue
        (seconds, own), base = got["probed"], got["plain"]
        m["own_us"].append(own * 1e6)
        m["own_shares"].append(own / base)
        m["costs_us"].append((seconds - base) * 1e6)
        m["shares"].append(seconds / base - 1)
        m["plain_ms"].append(base * 1e3)
        print(f"  {framework:<10} {name:<24} round {r} [{', '.join(order)}]: plain {base * 1e3:.2f} ms/step, probed "
              f"{seconds * 1e3:.2f} ms/step ({m['shares'][-1]:+.2%}); the probe's own code {own * 1e6:.0f} us/step "
              f"({m['own_shares'][-1]:.3%})", flush=True)
    return m


def summary(m: dict) -> tuple[list[str], bool]:
    """The gate holds the probe's own time on the script's path (measured in the probed process, exact to its
    clock); the plain-against-probed difference checks it, to the width its per-process noise allows."""
    own, own_share = stats.estimate(m["own_us"]), stats.estimate(m["own_shares"])
    share, cost, step = stats.estimate(m["shares"]), stats.estimate(m["costs_us"]), stats.estimate(m["plain_ms"])
    ok = own_share.high <= GATE
    return ([f"  {m['framework']:<10} {m['script']:<24} the probe's own code {own.text('{:.0f} us'.format)} per step, "
             f"{own_share.text('{:.3%}'.format)} of a {step.median:.2f} ms step; gate (the bracket's top) <= "
             f"{GATE:.0%}: {'ok' if ok else 'MISSED'}",
             f"  {'':<35} plain against probed, whole steps: {cost.text('{:+.0f} us'.format)}, "
             f"{share.text('{:+.2%}'.format)} over {len(m['shares'])} rounds (fresh processes each: their own biases "
             f"are in this spread)"], ok)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/bench_probe.py", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--frameworks", default="pytorch,tensorflow")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    os.environ["BENCH_STEPS"] = str(args.steps)          # both sides' scripts read it
    print("== the probe's cost: a script plain and under the probe, every observation on", flush=True)
    measured = []
    with tempfile.TemporaryDirectory(prefix="reprokit-bench-probe-") as tmp:
        for fw in args.frameworks.split(","):
            for name in FILES[fw]:
                measured.append(bench(fw, name, args.rounds, Path(tmp) / Path(name).stem))
    print("== summary")
    ok = True
    for m in measured:
        lines, passed = summary(m)
        print("\n".join(lines))
        ok &= passed
    if args.json:
        args.json.write_text(json.dumps(measured, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as exc:
        print(f"bench_probe: {exc}", file=sys.stderr)
        sys.exit(2)

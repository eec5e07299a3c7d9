"""The check's plan: the `reprokit reproduce` command it runs (one repeat of fixed, as posted and each pitfall a
claim names, on both seed cases), and that plan printed with an estimate for each run, as a GPU runs it, before
any run (and by --plan-only, which runs nothing).
"""
from __future__ import annotations

from reprokit import cli
from reprokit.console import duration
from reprokit.execute import data_step
from reprokit.gpu_check import Options, folders, say
from reprokit.gpu_check.probed_scripts import SHOWN
from reprokit.plan import estimate, matrix
from reprokit.plan.experiments import BUILTIN_DIR, discover

TARGET_S = 240.0
REPEATS, VARIANTS = 1, "fixed,as_posted"     # one run of each configuration: this checks the path, not the spread
MAX_STEPS = 150
TWIN = "simplecnn_cifar10_memory"  # its last evaluation batch is partial (10,000 % 64 = 16): the warmup's twin
BENCH = {"min_rounds": 6, "max_rounds": 6, "undecided_rounds": 6, "per_process": 3, "target": 0.02, "warmup": 5,
         "steps": 40}

# --- the plan, the same on a GPU and in a CPU dry run ------------------------------------------

def reproduce_command(args: Options, extra: list[str], on_gpu: bool) -> list[str]:
    """The `reprokit reproduce` command this check runs: on a GPU the standard profile, in a CPU dry run the
    quick one (CPU-sized models); one repeat of the named variants and of each pitfall a claim names."""
    cmd = ["reproduce", "--python", args.python, "--backend", "local", "--frameworks", "pytorch",
           "--only", "vgg16_cifar10_speed", "--only", "simplecnn_cifar10_memory",
           "--profile", "standard" if on_gpu else "quick", "--dataset", "synthetic", "--offline",
           "--gpus", "all" if on_gpu else "none", "--repeats", str(REPEATS), "--variants", VARIANTS,
           "--claims", "seeds", "--fresh", "--name", args.name, "--timeout", str(args.timeout),
           "--state-dir", str(args.state_dir), *folders(args, extra),
           "--no-certify"]    # the certificate compares two frameworks
    if not any(a.startswith("--max-steps") for a in extra):
        cmd += ["--max-steps", str(MAX_STEPS)]
    return cmd + extra


def gpu_plan(args: Options, extra: list[str], gpu_name: str, host_modules: tuple[str, ...],
             optional_modules: dict[str, str]) -> float | None:
    """Print the runs this check makes on a GPU, each with its estimate (training FLOPs at a stated share of
    the GPU's datasheet peak), the warmup twin and the bench; return the estimate of the timed part. A CPU dry
    run prints the same plan, for the GPU the project is lent, before its own CPU-sized runs."""
    req = cli.parse([*reproduce_command(args, extra, on_gpu=True)[1:], "--dry-run"])
    experiments = matrix.selected(req.what, discover([BUILTIN_DIR, *req.what.experiment_dirs]))
    interpreter = {"lock": None, "lock_sha256": None, "image": None, "interpreter": args.python}
    specs, _ = matrix.planned(req, experiments, "standard", "gpu", lambda fw: interpreter,
                              data_step.LookedUp(req.how.data_dir))
    guesses = [estimate.seconds(s, [], gpu_name) for s in specs]
    twin = next((g for s, g in zip(specs, guesses) if s.experiment == TWIN and s.variant == "fixed"), None)
    if twin:
        guesses.append(twin)
    known = [g for g, _ in guesses if g is not None]
    total = sum(known) if len(known) == len(guesses) else None
    say(f"\n== the plan on a GPU ({gpu_name}{', as a CPU dry run would run it there' if args.cpu_dry_run else ''}): "
        f"{len(specs) + bool(twin)} runs, standard profile, {REPEATS} repeat, at most {MAX_STEPS} steps per epoch, "
        f"estimated {duration(total)} (target < {TARGET_S:.0f} s)")
    for i, (s, (seconds, how)) in enumerate(zip(specs, guesses), 1):
        say(f"  {i:>2}. {s.experiment:<26} {s.framework:<8} {s.variant:<24} ~{duration(seconds)} ({how})")
    if twin:
        say(f"  {len(specs) + 1:>2}. {TWIN:<26} pytorch  fixed, full last batch ~{duration(twin[0])} (the warmup's "
            f"twin: its evaluation peak must equal the run's, whose last batch is partial)")
    fixed = {s.experiment for s in specs if s.variant == "fixed"}
    say(f"  with them: seed 000's posted PyTorch script ({SHOWN}) under the probe, unmodified, "
        f"50 steps and 1 epoch of the generated stand-in (its estimate: unknown, a script's cost is known once it "
        f"ran)")
    say(f"  then, apart from the target: the certificate's PyTorch half at the timed size (structure), and the kit "
        f"against its bare loop on {len(fixed)} spec(s), one per experiment ({BENCH['max_rounds']} rounds in "
        f"processes of {BENCH['per_process']}, {BENCH['steps']} steps per side)")
    say(f"  host packages: {', '.join(host_modules)} (and numpy, which comes with PyTorch); optional: "
        f"{', '.join(f'{m} ({w})' for m, w in optional_modules.items())}. An offline box installs them with "
        f"`pip install --no-index --find-links WHEELHOUSE {' '.join(host_modules)}` from a wheelhouse that "
        f"`nox -s wheelhouse` makes.")
    return total

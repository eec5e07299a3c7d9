"""Apart from the time target, on the same device: PyTorch's tuned variant on ResNet-50 (fixed, each tuned
setting alone, tuned), with what the framework read back of each, and the JAX kit on the seeds' cases where the
kit's interpreter imports jax, flax and optax. Each returns its misses and the seconds it took.
"""
from __future__ import annotations

import json
import subprocess
import time

from reprokit import cli
from reprokit.gpu_check import Options, reports_dir, say
from reprokit.gpu_check.plan import reproduce_command
from reprokit.report.gpu_check_lines import key_figures, tuned_line

JAX_PROBE = "import jax, flax, optax; print(jax.__version__, flax.__version__, optax.__version__)"
TUNED_EXPERIMENT = "resnet50_imagenet_speed"    # the model NVIDIA's "similar" cites, at its published size


def tuned_part(args: Options, extra: list[str], on_gpu: bool) -> tuple[list[str], float]:
    """PyTorch's tuned variant on ResNet-50: fixed, each tuned setting alone (mixed precision, cuDNN autotuning,
    torch.compile, channels_last), then tuned from what they showed; each run's key figures (the precision,
    execution and data layout the framework read back, the loss scale); the misses and the seconds it took,
    apart from the target."""
    t0 = time.monotonic()
    cmd = reproduce_command(args, extra, on_gpu)
    cmd[cmd.index("--variants") + 1] = "fixed,tuned"
    cmd[cmd.index("--claims") + 1] = "none"
    cmd[cmd.index("--name") + 1] = f"{args.name}-tuned"
    while "--only" in cmd:                          # the seeds' cases are the first part's
        at = cmd.index("--only")
        del cmd[at:at + 2]
    cmd += ["--only", TUNED_EXPERIMENT]
    say("$ python -m reprokit " + " ".join(cmd) + "\n")
    code = cli.main(cmd)
    report_dir = reports_dir(args, extra) / f"{args.name}-tuned"
    paths = sorted((report_dir / "results").glob("*.json"))
    for path in paths:
        say(tuned_line(json.loads(path.read_text())))
    missed = [f"the tuned runs ended with exit {code}"] if code else []
    return missed + ([] if paths else ["the tuned runs wrote no result"]), time.monotonic() - t0


def jax_part(args: Options, extra: list[str], on_gpu: bool) -> tuple[list[str], float]:
    """The JAX kit on the same cases where PY imports jax, flax and optax (the lent device has PyTorch only):
    the fixed variant (no JAX post to reproduce), its key figures; the misses and the seconds it took, apart
    from the target (it is not the PyTorch check's)."""
    t0 = time.monotonic()
    found = subprocess.run([args.python, "-c", JAX_PROBE], capture_output=True, text=True, timeout=300, check=False)
    if found.returncode != 0:
        say("JAX: not installed on this device, not measured")
        return [], time.monotonic() - t0
    say(f"JAX: jax, flax, optax {found.stdout.strip()} in {args.python}")
    cmd = reproduce_command(args, extra, on_gpu)
    cmd[cmd.index("--frameworks") + 1] = "jax"
    cmd[cmd.index("--variants") + 1] = "fixed"
    cmd[cmd.index("--claims") + 1] = "none"
    cmd[cmd.index("--name") + 1] = f"{args.name}-jax"
    say("$ python -m reprokit " + " ".join(cmd) + "\n")
    code = cli.main(cmd)
    report_dir = reports_dir(args, extra) / f"{args.name}-jax"
    paths = sorted((report_dir / "results").glob("*.json"))
    for path in paths:
        say(key_figures(path))
    missed = [f"the JAX runs ended with exit {code}"] if code else []
    return missed + ([] if paths else ["the JAX runs wrote no result"]), time.monotonic() - t0

"""A script's ranks on this device: the torchrun corpus script through its launcher at one device (a sweep of 1,
through the same code path as a sweep of N), and, on a GPU, a rank whose collectives run on gloo beside its CUDA
model (the finding collectives-on-gloo, its positive case). Each prints what the run saw and returns what it
missed; what one device cannot show is printed too.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reprokit import cli
from reprokit.gpu_check import Options, clone, folders, reports_dir, say

TORCHRUN = Path("tests", "corpus", "launchers", "torchrun_ddp", "ddp_torchrun.py")      # of the clone
UNTESTED = ("NCCL's collectives between GPUs; the processes' memory added over several GPUs; a straggler among "
            "real devices; one container holding N GPUs with NCCL's shared memory; a sweep's placement on a host of "
            "several GPUs; the kit's own experiments at N (DDP over NCCL, MirroredStrategy and a JAX mesh over GPUs)")
GLOO_ON_GPU = """\
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")                    # on the host, while the model trains on the GPU
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
model = DDP(torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(4096, 512), torch.randint(0, 10, (4096,)))
for x, y in torch.utils.data.DataLoader(data, batch_size=128):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
    optimizer.step()
dist.destroy_process_group()
"""


def _run(args: Options, extra: list[str], on_gpu: bool, name: str, script: str) -> dict[str, Any] | None:
    cmd = ["reproduce", "--script", script, "--devices", "1", "--frameworks", "pytorch", "--python", args.python,
           "--backend", "local", "--profile", "standard" if on_gpu else "quick", "--dataset", "learnable",
           "--offline", "--gpus", "all" if on_gpu else "none", "--repeats", "1", "--fresh", "--no-certify",
           "--name", name, "--timeout", str(args.timeout), "--state-dir", str(args.state_dir), "--max-steps",
           "30" if on_gpu else "4", "--epochs", "1", *folders(args, extra)]
    say("$ python -m reprokit " + " ".join(cmd))
    code = cli.main(cmd)
    report_dir = reports_dir(args, extra) / name
    results = [json.loads(p.read_text()) for p in sorted((report_dir / "results").glob("*.json"))]
    return results[0] if not code and results and results[0]["status"] == "ok" else None


def ranks_on_one_device(args: Options, extra: list[str], on_gpu: bool) -> list[str]:
    """The torchrun corpus script at --devices 1 (one rank, NCCL on a GPU, gloo on the CPU), and on a GPU a rank on
    gloo beside its CUDA model. Returns what it missed."""
    say(f"\n== a script's ranks on this device: {TORCHRUN} through torchrun at --devices 1")
    r = _run(args, extra, on_gpu, f"{args.name}-ranks",
             f"pytorch=torchrun --nproc-per-node {{devices}} {clone() / TORCHRUN} 1 1")
    if r is None:
        return ["the torchrun corpus script did not finish at one device"]
    p = r.get("processes") or {}
    each = p.get("each") or [{}]
    say(f"  seen: {p.get('seen')}; backend {each[0].get('backend')}; steps {[e.get('steps') for e in each]}; global "
        f"batch {(p.get('total') or {}).get('global_batch')}; device {r['environment']['device']}")
    missed = [] if p.get("seen") == "1 rank" else [f"the torchrun run's rank was not seen as one ({p.get('seen')})"]
    if each[0].get("backend") != ("nccl" if on_gpu else "gloo"):
        missed.append(f"the rank's collectives ran on {each[0].get('backend')}")
    if on_gpu:
        script = Path(args.state_dir).resolve() / "gloo-on-gpu" / "train.py"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(GLOO_ON_GPU)
        say("\n== a rank on gloo beside its CUDA model (collectives-on-gloo's positive case)")
        r = _run(args, extra, on_gpu, f"{args.name}-gloo", f"pytorch=torchrun --nproc-per-node {{devices}} {script}")
        found = [f["message"] for f in (r or {}).get("findings", []) if f["code"] == "collectives-on-gloo"]
        say(f"  collectives-on-gloo: {found or 'not found'}")
        if not found:
            missed.append("a rank on gloo beside its CUDA model was not found (collectives-on-gloo)")
    else:
        say("  a rank on gloo beside a CUDA model: GPU only")
    say(f"  untested here at N > 1: {UNTESTED}")
    return missed

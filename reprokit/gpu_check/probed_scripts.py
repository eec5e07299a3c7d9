"""Scripts the kit did not write, run unmodified under the probe on this device, each bounded: seed 000's posted
PyTorch script, a corpus script written as PyTorch's MNIST example writes it, and a script whose model never
moves to the GPU. Each prints its key figures and returns what it missed.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from reprokit import cli, resources
from reprokit.gpu_check import Options, clone, folders, reports_dir, say
from reprokit.report.gpu_check_lines import identity_ok, key_figures

SCRIPT = resources.experiments() / "seed000" / "train_torch.py"    # seed 000's posted PyTorch script
SHOWN = SCRIPT.relative_to(resources.kit_import_root())             # reprokit/kits/experiments/seed000/train_torch.py
POSTED = "vgg16_cifar10_speed"                                            # the experiment it is a variant of


def probed_script(args: Options, extra: list[str], on_gpu: bool) -> list[str]:
    """Seed 000's posted PyTorch script, unmodified, under the probe on this device (its `verbatim` variant,
    bounded: 50 steps on a GPU, 4 on the CPU (more than its warmup), 1 epoch of the generated stand-in, its
    tqdm from the wheelhouse where one is given): the probe's GPU path on a script the kit did not write, its
    device identity and its phases. Returns what it missed."""
    name = f"{args.name}-script"
    cmd = ["reproduce", "--only", POSTED, "--variants", "verbatim", "--frameworks", "pytorch", "--claims", "none",
           "--python", args.python, "--backend", "local", "--profile", "standard" if on_gpu else "quick",
           "--dataset", "learnable", "--offline", "--gpus", "all" if on_gpu else "none", "--repeats", "1", "--fresh",
           "--name", name, "--timeout", str(args.timeout), "--state-dir", str(args.state_dir),
           "--max-steps", "50" if on_gpu else "4", "--epochs", "1", *folders(args, extra)]   # the main run's folders
    if args.wheelhouse:              # the box has no network: the script's hash-pinned tqdm comes from there
        os.environ.update(PIP_FIND_LINKS=str(Path(args.wheelhouse).resolve()), PIP_NO_INDEX="1")
    say(f"\n== seed 000's posted PyTorch script under the probe ({SHOWN}, unmodified, "
        f"bounded)\n$ python -m reprokit " + " ".join(cmd))
    code = cli.main(cmd)
    report_dir = reports_dir(args, extra) / name
    paths = sorted((report_dir / "results").glob("*.json"))
    for path in paths:
        say(key_figures(path))
    results = [json.loads(p.read_text()) for p in paths]
    if code or not results or results[0]["status"] != "ok":
        return ["the probed script did not finish"]
    if on_gpu and not identity_ok(results[0]):
        return ["the probed script's NVML sampler did not watch the framework's own device"]
    return []


CORPUS = Path("tests", "corpus", "mnist_examples", "main.py")      # of the clone: as PyTorch's examples write it


def corpus_script(args: Options, extra: list[str], on_gpu: bool) -> list[str]:
    """A corpus script in the style of PyTorch's MNIST example (argparse, `datasets.MNIST('../data',
    download=True)`, a loader with a worker and pinned memory on CUDA, a test pass after each epoch,
    `--save-model`), unmodified, under the probe on this device: 2 epochs of 50 steps on the generated MNIST
    stand-in (`--dataset learnable`: an offline box has no MNIST). Its bounded epochs must end in the
    script's own test pass. Returns what it missed."""
    name = f"{args.name}-corpus"
    cmd = ["reproduce", "--script", f"pytorch={clone() / CORPUS} --epochs 3 --save-model", "--frameworks", "pytorch",
           "--python", args.python, "--backend", "local", "--profile", "standard" if on_gpu else "quick",
           "--dataset", "learnable", "--offline", "--gpus", "all" if on_gpu else "none", "--repeats", "1", "--fresh",
           "--name", name,
           "--timeout", str(args.timeout), "--state-dir", str(args.state_dir), "--max-steps", "50" if on_gpu else "4",
           "--epochs", "2", *folders(args, extra)]
    say(f"\n== a corpus script under the probe ({CORPUS}, unmodified, bounded)\n"
        f"$ python -m reprokit " + " ".join(cmd))
    code = cli.main(cmd)
    report_dir = reports_dir(args, extra) / name
    results = [json.loads(p.read_text()) for p in sorted((report_dir / "results").glob("*.json"))]
    for path in sorted((report_dir / "results").glob("*.json")):
        say(key_figures(path))
    if code or not results or results[0]["status"] != "ok":
        return ["the corpus script did not finish"]
    r = results[0]
    phases = [(p["epoch"], p["phase"]) for p in r["memory"]["phases"]]
    say(f"  phases {phases}; test samples {r['effective'].get('test_samples')}; notes {r['probe'].get('notes')}")
    if not any(phase == "eval" for _, phase in phases):
        return ["the corpus script's own test pass was not seen"]
    if on_gpu and not identity_ok(r):
        return ["the corpus script's NVML sampler did not watch the framework's own device"]
    return []


CPU_MODEL = """\
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(8192, 256)
y = (x[:, 0] + x[:, 1] > 0).long()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=128, shuffle=True)
model = nn.Sequential(nn.Linear(256, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                      nn.Linear(2048, 2))                                   # never moved to the GPU
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for epoch in range(2):
    for inputs, labels in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
"""


def model_on_cpu(args: Options, extra: list[str], on_gpu: bool) -> list[str]:
    """A PyTorch script that never moves its model to the GPU, run as a GPU run: measured on the CPU, as the
    script chose, with the finding model-not-on-gpu (the GPU's idle share, as NVML sampled it): 1 epoch of 60
    steps of about 4 GFLOP each, seconds on the host's CPU. In a CPU dry run it runs as a CPU run on the quick
    profile, and only has to finish. Returns what it missed."""
    name = f"{args.name}-cpu-model"
    script = Path(args.state_dir).resolve() / "cpu-model" / "train.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(CPU_MODEL)
    cmd = ["reproduce", "--script", f"pytorch={script}", "--frameworks", "pytorch", "--python", args.python,
           "--backend", "local", "--profile", "standard" if on_gpu else "quick", "--dataset", "learnable", "--offline",
           "--gpus", "all" if on_gpu else "none",
           "--repeats", "1", "--fresh", "--name", name, "--timeout",
           str(args.timeout), "--state-dir", str(args.state_dir), "--max-steps", "60", "--epochs", "1",
           *folders(args, extra)]
    say("\n== a PyTorch script whose model never moves to the GPU, as a GPU run\n$ python -m reprokit "
        + " ".join(cmd))
    code = cli.main(cmd)
    report_dir = reports_dir(args, extra) / name
    results = [json.loads(p.read_text()) for p in sorted((report_dir / "results").glob("*.json"))]
    if code or not results or results[0]["status"] != "ok":
        return ["the script whose model stays on the CPU did not finish"]
    r = results[0]
    found = [f["message"] for f in r.get("findings", []) if f["code"] == "model-not-on-gpu"]
    say(f"  device {r['environment']['device']} ({r['environment']['device_name']}); model-not-on-gpu: "
        f"{found or 'none'}; NVML utilisation {r['environment'].get('nvml', {}).get('utilization')}")
    if on_gpu and (r["environment"]["device"] != "cpu" or not found or "idle (utilisation 0%)" not in found[0]):
        return ["the script whose model stays on the CPU was not measured there with the GPU's idle time"]
    return []


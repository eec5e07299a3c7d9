"""Scripts that train in several processes or on several devices, end to end through the CLI as users run them.

Two of the suite's three end-to-end runs of many ranks (the third, a JAX mesh at two devices, is in
tests/test_devices.py): the `torchrun` DDP corpus script against Keras `fit` under MirroredStrategy, a pair at
`--devices 1,2` (a sweep) on this CPU's stand-in devices, certified at each count and timed; and the Hogwild corpus script, whose
workers each train the one shared model. Each run's report names how many ranks, workers or replicas it saw, with
each one's figures and their totals; every bound holds on every rank; no process outlives the run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import REPO

CORPUS = REPO / "tests" / "corpus"
TORCHRUN = CORPUS / "launchers" / "torchrun_ddp" / "ddp_torchrun.py"
MIRRORED = CORPUS / "devices" / "mirrored_keras.py"
HOGWILD = CORPUS / "processes" / "hogwild" / "main.py"
pytestmark = [pytest.mark.slow, pytest.mark.alone,
              pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two stand-in devices need two CPUs")]


def _reproduce(tmp: Path, data_dir: Path, name: str, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    command = [sys.executable, "-m", "reprokit", "reproduce", *args, "--backend", "local", "--profile", "quick",
               "--claims", "none", "--state-dir", str(tmp / "state"), "--data-dir", str(data_dir), "--reports-dir",
               str(tmp / "reports"), "--name", name]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, tmp / "reports" / name


def _results(report: Path, devices: int = 1) -> dict[str, dict]:
    return {r["framework"]: r for r in (json.loads(p.read_text()) for p in (report / "results").glob("*.json"))
            if r["spec"].get("devices", 1) == devices}


def _still_running(state: Path) -> list[int]:
    """The processes the probe attached to in any run under the state folder that still run."""
    alive = []
    for marker in state.glob("work/*/out/processes/*.started"):
        stat = Path(f"/proc/{marker.name.removesuffix('.started')}/stat")
        if stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            alive.append(int(marker.name.removesuffix(".started")))
    return alive


def test_a_torchrun_ddp_script_and_keras_under_mirrored_strategy_at_two_devices(kit_python, tmp_path, data_dir):
    kit_python("pytorch"), kit_python("tensorflow")
    done, report = _reproduce(tmp_path, data_dir, "at-two", "--script",
                              f"pytorch=torchrun --nproc-per-node {{devices}} {TORCHRUN} 1 1", "--script",
                              f"tensorflow={MIRRORED}", "--devices", "1,2")
    results = _results(report, devices=2)
    pt, tf = results["pytorch"], results["tensorflow"]
    assert pt["status"] == tf["status"] == "ok", (pt.get("failure"), tf.get("failure"))
    assert pt["processes"]["seen"] == "2 ranks" and tf["processes"]["seen"] == "1 process, 2 replicas"
    assert [e["steps"] for e in pt["processes"]["each"]] == [3, 3]          # the quick bound, on every rank
    assert pt["processes"]["total"]["global_batch"] == 64 and tf["processes"]["total"]["global_batch"] == 128
    text = (report / "report.md").read_text()
    print("\n" + "\n".join(line for line in text.splitlines() if line.startswith(("- **At 2", "- PyTorch, `",
                                                                                 "- TensorFlow, `", "In all"))))
    assert "### Each process of the scripts" in text and "at 2 devices: 2 ranks; the run's figures are rank 0's" in text
    certificate = json.loads(next(report.glob("certificate-*-at2.json")).read_text())
    checks = {c["name"]: c for c in certificate["checks"]}
    print(json.dumps({n: checks[n]["evidence"] for n in ("batches", "gradient_reduction", "data_shards",
                                                        "batchnorm_sync")}, indent=1))
    # 64 against 128: the corpus pair scaled differently (the torchrun script holds 32 per rank, the Keras one 64
    # per replica), and the certificate at N says so
    assert checks["batches"]["passed"] is False and "global batch 64" in checks["batches"]["evidence"]
    assert checks["gradient_reduction"]["passed"] is True, checks["gradient_reduction"]["evidence"]
    assert checks["data_shards"]["passed"] is True
    assert "- **At 2 devices:** certificate at N **FAIL** (batches)" in text
    # the sweep: each framework at 1 and 2 devices, scaled as its batches show (both hold the batch per device)
    scaling = text[text.index("### Scaling, side by side"):].split("\n### ")[0].split("\n## ")[0]
    print(scaling)
    assert "PyTorch **weak**; TensorFlow **weak**" in scaling and "stand-in devices that share one machine" in scaling
    assert (report / "at_two-scaling.png").exists() and "](at_two-scaling.png)" in scaling
    assert not _still_running(tmp_path / "state")


def test_hogwild_workers_each_train_the_shared_model(kit_python, tmp_path, data_dir):
    kit_python("pytorch")
    _, report = _reproduce(tmp_path, data_dir, "hogwild", "--script", f"pytorch={HOGWILD}", "--frameworks",
                           "pytorch")
    r = _results(report)["pytorch"]
    assert r["status"] == "ok", r.get("failure")
    p = r["processes"]
    print(f"\n| hogwild/main.py | {p['seen']} | {[e['batch_size']['configured'] for e in p['each']]} per worker | "
          f"{[e['steps'] for e in p['each']]} steps |")
    assert p["seen"] == "2 workers" and [(e["who"], e["steps"]) for e in p["each"]] == [("worker 1", 3),
                                                                                        ("worker 2", 3)]
    assert p["total"]["global_batch"] is None and p["total"]["samples"] == 2 * 3 * 64
    assert not _still_running(tmp_path / "state")

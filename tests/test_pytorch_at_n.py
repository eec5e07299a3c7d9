"""The PyTorch kit's own runs at N devices, for real: DDP under torchrun on a CPU's stand-in devices (gloo)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import stub_matrix as sm
from checkout import REPO
from conftest import TINY, tiny_specs, write_spec

from reprokit.kits.contract.pitfalls import PITFALLS
from reprokit.results import results

pytestmark = pytest.mark.slow

# A model whose step does not depend on how the batch is split: no BatchNorm (each device's own statistics) and no
# dropout (each device's own masks), so two ranks must train what one device trains on the same global batches.
PLAIN_MODEL = """[model]
name = "vgg16"
num_classes = 10
width_multiplier = 0.0625
classifier_width = 64
dropout = 0.0
head = "flatten"
init = { conv = "he_uniform", dense = "he_uniform", bias = "zeros" }

"""


def _run(python: Path, spec: dict, folder: Path, data_dir: Path) -> tuple[dict, subprocess.CompletedProcess]:
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "result.json"
    proc = subprocess.run([str(python), "-m", "reprokit.kits.run", "--spec", str(write_spec(folder, spec)), "--out",
                           str(out), "--data-dir", str(data_dir)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    return json.loads(out.read_text()), proc


def _specs(folder: Path, data_dir: Path, toml: str, devices: int, edit=None) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny.toml").write_text(toml)

    def at(spec: dict) -> None:
        spec["devices"] = devices
        if edit:
            edit(spec)
    return tiny_specs(folder, data_dir, edit=at)["pytorch"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_run_at_two_devices_is_two_ddp_ranks_each_with_its_share(kit_python, tmp_path, data_dir):
    spec = _specs(tmp_path / "exp", data_dir, TINY, 2)
    result, proc = _run(kit_python("pytorch"), spec, tmp_path / "run", data_dir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert results.problems(result) is None
    p = result["processes"]
    assert p["seen"] == "2 ranks" and p["ranks"] == 2
    assert [e["batch_size"]["configured"] for e in p["each"]] == [16, 16]
    assert p["total"]["global_batch"] == 32 and p["total"]["samples_per_s"] > 0
    d = result["distributed"]
    assert d["how"].startswith("DDP over 2 ranks (gloo)")
    assert "2 stand-in devices" in d["stand_ins"][0]
    first, second = d["evidence"]
    assert [first["who"], second["who"]] == [{"role": "rank", "index": 0}, {"role": "rank", "index": 1}]
    assert first["batch"] == second["batch"] == 16
    assert not set(first["samples"]) & set(second["samples"])          # each rank its own samples
    for e in (first, second):
        assert abs(e["loss_scale"]["factor"] - 1) < 1e-6 and e["batchnorm"] == "per device"
    spans = result["timing"]["backward_span_s"]            # rank 0's, as at one device
    assert len(spans) == sum(result["effective"]["train_steps_per_epoch"]) - spec["train"]["warmup_steps"]
    # rank 0's progress lines are the run's; no rank outlives it
    assert len([line for line in proc.stdout.splitlines() if '"phase": "epoch"' in line]) == spec["train"]["epochs"]
    assert not any(_alive(e["pid"]) for e in p["each"])


def test_two_ranks_train_what_one_device_trains(kit_python, tmp_path, data_dir):
    """The same global batches, the ranks' gradients averaged: after the same steps, the model evaluates the same
    at one device and at two (fp32 sums in another order: within 1e-5)."""
    plain = re.sub(r"\[model\].*?\n\n", PLAIN_MODEL, TINY, flags=re.S)

    def short(spec: dict) -> None:
        spec["train"].update(epochs=1, max_steps_per_epoch=2, warmup_steps=1)

    losses = {}
    for n in (1, 2):
        result, proc = _run(kit_python("pytorch"), _specs(tmp_path / f"exp{n}", data_dir, plain, n, short),
                            tmp_path / f"run{n}", data_dir)
        assert result["status"] == "ok", proc.stderr[-3000:]
        assert len(result["timing"]["backward_span_s"]) == 1         # the step after the warmup, at every count
        losses[n] = result["metrics"]["epochs"][0]["test_loss"]
    assert losses[2] == pytest.approx(losses[1], rel=1e-5)


def test_a_batch_the_ranks_cannot_split_is_refused_by_each_rank_naming_it(kit_python, tmp_path, data_dir):
    """The posted DataLoader feeds batches of its own, which DDP would not split: the run fails, saying so."""
    posted = "pt_cpu_resize_dataloader"

    def with_loader(spec: dict) -> None:
        spec.update(pitfalls=[posted], pitfall_summaries={posted: PITFALLS[posted]["summary"]})

    result, proc = _run(kit_python("pytorch"), _specs(tmp_path / "exp", data_dir, TINY, 2, with_loader),
                        tmp_path / "run", data_dir)
    assert proc.returncode == 1 and result["status"] == "failed"
    assert re.fullmatch(r"rank [01] RuntimeError: a run at 2 devices splits the kit's own batches among its ranks; "
                        r"the posted DataLoader feed\(s\) batches of its own, which DDP would not split: run it at "
                        r"one device", result["failure"]["message"]), result["failure"]["message"]


@pytest.mark.parametrize("end", ["ctrl-c", "timeout"])
def test_a_kit_run_at_two_devices_ended_by_ctrl_c_or_its_timeout_leaves_no_process(kit_python, tmp_path, data_dir,
                                                                                  end):
    """Ctrl-C while the kit's two DDP ranks train ends the command with 130 within 10 s; a run past its --timeout
    fails saying so and the command goes on to its end. Either way neither torchrun, nor a rank, nor the run's own
    process outlives it."""
    kit_python("pytorch")
    exps = tmp_path / "exps"
    exps.mkdir()
    (exps / "tiny.toml").write_text(TINY.replace("epochs = 2\n", "epochs = 500\n"))
    state = tmp_path / "state"
    cmd = [sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(exps), "--only", "tiny",
           "--frameworks", "pytorch", "--devices", "2", "--variants", "fixed", "--repeats", "1", "--no-certify",
           "--backend", "local", "--data-dir", str(data_dir), "--state-dir", str(state), "--reports-dir",
           str(tmp_path / "reports"), *(["--timeout", "30"] if end == "timeout" else [])]
    log = tmp_path / "out.log"

    def ranks_training() -> dict[int, str]:
        """The run's processes (its launcher, torchrun, the two ranks) once its progress line is past epoch 1."""
        kits = sm.kit_processes(state)
        ranks = [text for text in kits.values() if "torch.distributed.run" not in text and "-u -m reprokit.kits.run " in text]
        past_one = re.search(r" at 2 devices · epoch ([2-9]|\d\d+)/500", log.read_text())
        return kits if len(ranks) == 2 and len(kits) == 4 and past_one else {}
    with sm.ended_at_exit(sm.start(cmd, log)) as proc:
        kits = sm.wait_for(ranks_training, timeout=180)
        if end == "ctrl-c":
            os.kill(proc.pid, signal.SIGINT)
        out = sm.output(proc, log, timeout=10 if end == "ctrl-c" else 120)
    if end == "ctrl-c":
        assert proc.returncode == 130, out[-2000:]
    else:
        assert proc.returncode == 1 and "FAILED (timeout: the run exceeded its 30 s limit)" in out, out[-2000:]
    assert sm.wait_for(lambda: all(sm.gone(p) for p in kits), timeout=5), \
        f"still running: {[text for p, text in kits.items() if not sm.gone(p)]}"

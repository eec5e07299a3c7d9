"""The tuned variant (reprokit/plan/tuning.py): what each framework gets on each device, every setting declared;
a real run of each setting alone and of tuned, whose settings the frameworks read back; the rule that leaves out a
setting that slowed the device alone; the first screen's tuned line; tuned refused on a GPU without bf16."""
from __future__ import annotations

import copy
import json
import re
import sys

import pytest
from checkout import REPO

from reprokit import cli
from reprokit.errors import UserError
from reprokit.execute import compose
from reprokit.kits.contract.spec import RunSpec
from reprokit.plan import tuning
from reprokit.report import tuned_section
from reprokit.results import runs


def _argv(tiny_dir, tmp_path, *extra: str) -> list[str]:
    return ["--experiments", str(tiny_dir), "--only", "tiny", "--backend", "local", "--claims", "none",
            "--variants", "fixed,tuned", "--state-dir", str(tmp_path / "state"), "--data-dir", str(tmp_path / "data"),
            "--reports-dir", str(tmp_path / "reports"), "--name", "t", *extra]


def _by(specs):
    return {(s.framework, s.variant): s for s in specs}


def test_on_a_cpu_each_framework_gets_its_own_settings_alone_and_together(tiny_dir, tmp_path):
    m = compose.build(cli.parse([*_argv(tiny_dir, tmp_path), "--dry-run"]))
    by = _by(m.specs)
    assert sorted(v for fw, v in by if fw == "pytorch") == ["+tuned_channels_last", "+tuned_inter_op", "fixed",
                                                            "tuned"]
    assert sorted(v for fw, v in by if fw == "tensorflow") == ["+tuned_compile", "+tuned_inter_op", "fixed", "tuned"]
    pt, tf = by["pytorch", "tuned"].numerics, by["tensorflow", "tuned"].numerics
    assert (pt.channels_last, pt.compile, pt.cpu_threads.inter_op, pt.precision) == (True, False,
                                                                                      "framework_default", "fp32")
    assert (tf.channels_last, tf.compile, tf.cpu_threads.inter_op) == (False, True, "framework_default")
    assert [s.variant for s in m.specs][-2:] == ["tuned", "tuned"]           # planned last: it waits for the others
    declared = {d["field"]: d for d in by["pytorch", "tuned"].differences if d["field"].startswith("tuned: ")}
    assert declared["tuned: compile"]["pytorch"].startswith("torch.compile on a CPU needs a C++ compiler")
    assert declared["tuned: compile"]["key"] == "execution" and "XLA" in declared["tuned: compile"]["tensorflow"]
    assert declared["tuned: channels_last"]["tensorflow"] == "Keras convolutions run channels_last already"
    assert by["pytorch", "tuned"].differences == by["tensorflow", "tuned"].differences   # one list, both sides


def test_on_a_gpu_tuned_adds_mixed_precision_autotuning_and_compile(stand_in_gpu_host, tiny_dir, tmp_path, capsys):
    """bf16 on an H200, fp16 with loss scaling on a T4, and a P100 (no tensor cores) refused in one sentence."""
    stand_in_gpu_host()
    by = _by(compose.build(cli.parse([*_argv(tiny_dir, tmp_path), "--dry-run"])).specs)
    pt = by["pytorch", "tuned"].numerics
    assert (pt.precision, pt.cudnn_autotune, pt.compile, pt.channels_last) == ("bf16_mixed", True, True, True)
    assert pt.cpu_threads == by["pytorch", "fixed"].numerics.cpu_threads        # threads are a CPU's setting
    assert by["pytorch", "+tuned_precision"].numerics.precision == "bf16_mixed"
    query = tmp_path / "gpu-host" / "query.txt"                                  # the same host with a T4
    text = query.read_text()
    query.write_text(text.replace("NVIDIA H200, 580.95.05, 9.0", "Tesla T4, 580.95.05, 7.5"))
    by = _by(compose.build(cli.parse([*_argv(tiny_dir, tmp_path), "--dry-run"])).specs)
    assert {by[fw, v].numerics.precision for fw in ("pytorch", "tensorflow") for v in ("tuned", "+tuned_precision")} \
        == {"fp16_mixed"}
    said = next(d for d in by["pytorch", "tuned"].differences if d["field"] == "tuned: precision")
    assert said["pytorch"].startswith("fp16 mixed precision with dynamic loss scaling") and "no bf16" in said["pytorch"]
    query.write_text(text.replace("NVIDIA H200, 580.95.05, 9.0", "Tesla P100-PCIE-16GB, 580.95.05, 6.0"))
    # the machine's own interpreter (the kit's CUDA 13 builds refuse a P100 before that, as any run on it)
    assert cli.main(["reproduce", *_argv(tiny_dir, tmp_path), "--dry-run", "--python", sys.executable]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --variants tuned (its mixed precision: bf16, or fp16 with "
                                                   "loss scaling where a GPU has no bf16) needs compute capability 7.0")
    assert "leave tuned out with --variants fixed,as_posted" in err
    with pytest.raises(UserError):      # and nothing else of the plan asks for mixed precision: fixed alone plans
        compose.build(cli.parse([*_argv(tiny_dir, tmp_path), "--dry-run", "--python", sys.executable]))
    assert compose.build(cli.parse([*_argv(tiny_dir, tmp_path), "--dry-run", "--variants", "fixed", "--python",
                                   sys.executable])).specs


def test_a_real_tuned_run_applies_what_its_settings_alone_did_not_slow(kit_python, tiny_dir, tmp_path):
    """Both frameworks, each setting alone once, then tuned: each run's own readback shows its setting applied;
    tuned keeps what did not slow the device alone; the first screen has its line with each MFU."""
    import subprocess
    cmd = [sys.executable, "-m", "reprokit", "reproduce", *_argv(tiny_dir, tmp_path, "--no-certify", "--max-steps",
                                                                  "6")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "0 already finished, 6 to run, then 2 tuned, run where not finished before" in proc.stdout
    # run again: everything is finished, tuned too, which the plan can only say once its settings alone have run
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "8 runs" in again.stdout and "6 already finished, 0 to run, then 2 tuned" in again.stdout
    assert "[tuned run" in proc.stdout and "[tuned run" not in again.stdout and "[run " not in again.stdout
    results = [json.loads(p.read_text()) for p in (tmp_path / "state" / "results").glob("*.json")]
    by = {(r["framework"], r["variant"]): r for r in results}
    seen = {k: r["environment"]["settings"] for k, r in by.items()}
    assert seen["pytorch", "+tuned_channels_last"]["data_layout"]["value"] == "NHWC"
    assert seen["pytorch", "fixed"]["data_layout"]["value"] == "NCHW"
    assert seen["tensorflow", "+tuned_compile"]["execution"]["value"] == "tf.function graph with XLA"
    assert seen["tensorflow", "+tuned_inter_op"]["threads.inter_op"]["value"] == 0       # TensorFlow's own pool
    assert seen["tensorflow", "fixed"]["threads.inter_op"]["value"] == 1
    for fw in ("pytorch", "tensorflow"):
        choice = tuning.choose(results, RunSpec.from_dict(by[fw, "fixed"]["spec"]))
        assert f"tuned: tiny / {'PyTorch' if fw == 'pytorch' else 'TensorFlow'}: " in proc.stdout
        applied = by[fw, "tuned"]["spec"]["numerics"]
        assert applied.get("channels_last", False) == any(s.name == "channels_last" for s in choice.kept)
        assert (applied["cpu_threads"]["inter_op"] == "framework_default") == any(s.name == "inter_op"
                                                                                 for s in choice.kept)
    report = (tmp_path / "reports" / "t" / "report.md").read_text()
    line = next(x for x in report.splitlines() if x.startswith("  - tuned "))
    assert "(MFU PyTorch " in line and ", TensorFlow " in line and "against fixed: PyTorch " in line

    checked = report.split("### Tuned against fixed")[1].split("###")[0]
    assert "| PyTorch " in checked and "| TensorFlow " in checked and "121,778 both" in checked
    # the warmup (a compiled step's compilation) apart from the timed throughput, in every run and in the table
    assert all(r["timing"]["warmup_s"] > 0 for r in results)
    assert "warmup, compilation included" in checked and re.search(r"\| [\d.]+ s against [\d.]+ s +\|", checked)
    grouped = runs.group(results)["tiny"]
    other = copy.deepcopy(grouped)                  # a tuned run of another model would fail the check
    other["tuned"]["pytorch"][0]["model"]["parameters"]["total"] += 1
    (pt_row, _) = tuned_section.rows(other)
    assert pt_row[1] == "**FAIL**" and pt_row[2].startswith("**121,779 against 121,778")
    # a loss 20% off fails; the same loss under channels_last with dropout (other masks drawn) is shown, not judged
    other = copy.deepcopy(grouped)
    t_run, f_run = other["tuned"]["pytorch"][0], other["fixed"]["pytorch"][0]
    t_run["metrics"]["epochs"][0]["train_loss"] = 1.2 * f_run["metrics"]["epochs"][0]["train_loss"]
    t_run["spec"]["numerics"]["channels_last"] = False
    assert tuned_section.rows(other)[0][1] == "**FAIL**"
    t_run["spec"]["numerics"]["channels_last"] = True
    assert t_run["spec"]["model"]["dropout"]            # the tiny model has dropout
    (pt_row, _) = tuned_section.rows(other)
    assert pt_row[1] == "pass (loss not judged)" and "(20.0%): not judged, channels_last draws" in pt_row[5]
    t_run["spec"]["model"]["dropout"] = [0.0, 0.0, 0.0]
    assert tuned_section.rows(other)[0][1] == "**FAIL**"

    # the rule: the same results with TensorFlow's compiled run made 10% slower than fixed leave compile out
    slower = copy.deepcopy(results)
    fixed_rate = by["tensorflow", "fixed"]["timing"]["samples_per_s"]
    for r in slower:
        if (r["framework"], r["variant"]) == ("tensorflow", "+tuned_compile"):
            r["timing"]["samples_per_s"] = 0.9 * fixed_rate
    choice = tuning.choose(slower, RunSpec.from_dict(by["tensorflow", "fixed"]["spec"]))
    dropped = {s.name: why for s, why in choice.dropped}       # inter_op as this CPU's timing had it
    assert dropped["compile"] == "alone it slowed TensorFlow here: 0.90x fixed's throughput"
    assert "compile" not in {s.name for s in choice.kept}


def test_a_setting_alone_that_a_claim_reads_runs_every_repeat(stand_in_gpu_host, tmp_path):
    """NVIDIA's TF32 figure for TensorFlow is XLA alone on fixed: the seeds' claim reads "+tuned_compile", which then
    runs at each repeat in TensorFlow, where PyTorch's compile alone runs once."""
    stand_in_gpu_host()
    m = compose.build(cli.parse(["--only", "resnet50_imagenet_speed", "--backend", "local", "--repeats", "3",
                                "--state-dir", str(tmp_path / "state"), "--data-dir", str(tmp_path / "data"),
                                "--dry-run"]))
    repeats = {(s.framework, s.variant): sorted(r.repeat for r in m.specs if (r.framework, r.variant) ==
                                                (s.framework, s.variant)) for s in m.specs}
    assert repeats["tensorflow", "+tuned_compile"] == [0, 1, 2] and repeats["pytorch", "+tuned_compile"] == [0]
    assert repeats["pytorch", "tuned"] == repeats["tensorflow", "fixed"] == [0, 1, 2]
    assert {s.name for s in tuning.SETTINGS} == set(runs.TUNED_SETTINGS)      # the names claims may read

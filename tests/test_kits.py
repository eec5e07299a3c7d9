"""Both kits, for real: short training runs in PyTorch and TensorFlow on the CPU."""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import tiny_specs, write_spec

from reprokit import model_cost, results
from reprokit.provenance import REPO
from reprokit.report.parameter_counts import parameter_counts

pytestmark = pytest.mark.slow
FRAMEWORKS = ["pytorch", "tensorflow"]


def _run_kit(python, spec_path, out, data_dir):
    return subprocess.run([str(python), "-m", "kits.run", "--spec", str(spec_path), "--out", str(out),
                           "--data-dir", str(data_dir)], cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def tiny_results(kit_python, tmp_path_factory, data_dir):
    """One real run of the tiny experiment in each framework."""
    from conftest import TINY
    folder = tmp_path_factory.mktemp("exp")
    (folder / "tiny.toml").write_text(TINY)
    specs = tiny_specs(folder, data_dir)
    out = {}
    for fw, spec in specs.items():
        work = tmp_path_factory.mktemp(fw)
        proc = _run_kit(kit_python(fw), write_spec(work, spec), work / "result.json", data_dir)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        out[fw] = (json.loads((work / "result.json").read_text()), proc.stdout)
    return out


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_result_is_valid_and_complete(tiny_results, fw):
    result, _ = tiny_results[fw]
    assert results.problems(result) is None
    assert result["status"] == "ok" and result["framework"] == fw
    assert result["environment"]["framework"] == fw and result["environment"]["device"] == "cpu"
    assert result["environment"]["cpu_threads"] == {"intra_op": 1, "inter_op": 1}
    assert result["provenance"]["data_sha256"] == result["spec"]["data"]["sha256"]
    assert result["memory"]["source"].startswith("process peak resident memory")
    assert result["memory"]["peak_bytes"] > 50 * 2**20
    assert len(result["memory"]["over_steps"]) >= 2


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_effective_batch_and_counts_come_from_the_tensors(tiny_results, fw):
    result, _ = tiny_results[fw]
    eff = result["effective"]
    assert eff["batch_size"] == {"configured": 32, "min": 32, "max": 32, "mean": 32.0}
    assert eff["train_samples_per_epoch"] == [256, 256]     # 256 // 32 full batches, drop_last
    assert eff["train_steps_per_epoch"] == [8, 8]
    assert eff["test_samples"] == 64                         # evaluation keeps the last partial batch


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_timing_excludes_warmup_and_metrics_are_per_sample(tiny_results, fw):
    result, _ = tiny_results[fw]
    timing = result["timing"]
    assert timing["warmup_steps"] == 2
    assert timing["step_s"]["n"] == 2 * 8 - 2               # windows of one step after the warmup
    assert 0 < timing["step_s"]["p50"] <= timing["step_s"]["p95"]
    assert timing["samples_per_s"] > 0 and 0 <= timing["data_wait_fraction"] < 1
    assert len(timing["epochs"]) == 2
    for epoch in result["metrics"]["epochs"]:
        assert 0 <= epoch["train_accuracy"] <= 1 and 0 <= epoch["test_accuracy"] <= 1
        assert epoch["train_loss"] > 0 and epoch["test_loss"] > 0
        # accuracy averaged over samples: a multiple of 1/64 on the 64 test samples
        assert abs(epoch["test_accuracy"] * 64 - round(epoch["test_accuracy"] * 64)) < 1e-9
    assert result["metrics"]["averaged_over"] == "samples"


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_progress_lines_are_emitted(tiny_results, fw):
    _, stdout = tiny_results[fw]
    events = [json.loads(line.split(" ", 1)[1]) for line in stdout.splitlines()
              if line.startswith("REPROKIT-PROGRESS ")]
    assert any(e["phase"] == "epoch" and e["epoch"] == 2 for e in events)


def test_both_frameworks_build_the_same_model(tiny_results):
    pt = tiny_results["pytorch"][0]["model"]
    tf = tiny_results["tensorflow"][0]["model"]
    spec = tiny_results["pytorch"][0]["spec"]
    size = spec["data"]["input_size"]
    assert pt["parameters"] == tf["parameters"] == parameter_counts(spec["model"], size)
    # Each kit counted the training FLOPs of its own model from its own trace; the host's formula agrees.
    assert pt["flops_per_sample"] == tf["flops_per_sample"] == model_cost.training_flops_per_sample(spec["model"], size)
    assert pt["flops_counted"]["forward"] + pt["flops_counted"]["backward"] == pt["flops_per_sample"]




@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("experiment", ["vgg16_cifar10_speed", "simplecnn_cifar10_memory"])
def test_full_size_models_match_the_published_counts(kit_python, fw, experiment):
    """torchvision's vgg16(num_classes=10) and Keras's VGG16(classes=10) both have 134,301,514."""
    from reprokit.experiments import BUILTIN_DIR, load
    resolved = load(BUILTIN_DIR / f"{experiment}.toml").resolved("full")
    package = {"pytorch": "kits.pytorch_kit.models", "tensorflow": "kits.tensorflow_kit.models"}[fw]
    size = resolved["data"]["input_size"]
    trace = package.replace("models", "trace")
    device = ", 'cpu'" if fw == "pytorch" else ""
    code = (f"import json, sys; from {package} import build, parameter_counts; from {trace} import training_flops; "
            f"from kits.common.spec import Model, parse; "
            f"cfg = parse(Model, json.loads(sys.argv[1]), 'model'); m = build(cfg, {size}); "
            f"print(json.dumps({{**parameter_counts(m), 'flops': training_flops(m, {size}{device})}}))")
    if fw == "pytorch" and experiment == "simplecnn_cifar10_memory":
        # and PyTorch's own counter, over a real forward and backward pass, per sample
        code += ("; import torch; from torch.utils.flop_counter import FlopCounterMode; "
                 f"c = FlopCounterMode(display=False); c.__enter__(); m(torch.randn(2, 3, {size}, {size})).sum().backward(); "
                 "c.__exit__(None, None, None); print(c.get_total_flops() / 2)")
    proc = subprocess.run([str(kit_python(fw)), "-c", code, json.dumps(resolved["model"])], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    if fw == "pytorch" and experiment == "simplecnn_cifar10_memory":
        counted = float(lines.pop())
        assert counted == json.loads(lines[-1])["flops"]["training"]     # the rule is what torch counts
    counts = json.loads(lines[-1])
    flops = counts.pop("flops")
    assert counts == parameter_counts(resolved["model"], size)
    # The timed model's arithmetic at its size, from the kit's trace, as the host's formula has it
    assert flops["training"] == model_cost.training_flops_per_sample(resolved["model"], size)
    if experiment == "vgg16_cifar10_speed":
        assert counts["trainable"] == 134_301_514
        assert flops["forward"] == 30_932_418_560           # VGG16's published 15.47 G multiply-accumulates


def test_a_kit_that_fails_still_writes_a_failed_result(kit_python, tmp_path, tiny_dir, data_dir):
    def corrupt(spec):
        spec["data"]["sha256"] = "0" * 64     # the data changed since planning
    spec = tiny_specs(tiny_dir, data_dir, edit=corrupt)["pytorch"]
    proc = _run_kit(kit_python("pytorch"), write_spec(tmp_path, spec), tmp_path / "r.json", data_dir)
    assert proc.returncode == 1
    result = json.loads((tmp_path / "r.json").read_text())
    assert results.problems(result) is None
    assert result["status"] == "failed" and result["failure"]["kind"] == "error"
    assert "DataError" in result["failure"]["message"] and result["failure"]["log_tail"]


def test_a_gpu_run_without_a_gpu_fails_loudly(kit_python, tmp_path, tiny_dir, data_dir):
    def want_gpu(spec):
        spec["device"] = "gpu"
    spec = tiny_specs(tiny_dir, data_dir, edit=want_gpu)["tensorflow"]
    proc = _run_kit(kit_python("tensorflow"), write_spec(tmp_path, spec), tmp_path / "r.json", data_dir)
    result = json.loads((tmp_path / "r.json").read_text())
    assert proc.returncode == 1 and result["failure"]["kind"] == "no-gpu"
    assert "refusing to run on the CPU" in result["failure"]["message"]


def test_step_instrumentation_can_be_switched_off(kit_python, tmp_path, tiny_dir, data_dir):
    """Off, the run still measures its throughput and takes no per-step times (what the bench compares;
    whether it costs throughput is a benchmark's question, `nox -s bench`, not a test's)."""
    spec = tiny_specs(tiny_dir, data_dir)["tensorflow"]
    spec["measure"]["step_timing"] = False
    proc = _run_kit(kit_python("tensorflow"), write_spec(tmp_path, spec), tmp_path / "r.json", data_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    timing = json.loads((tmp_path / "r.json").read_text())["timing"]
    assert timing["step_s"]["n"] == 0 and timing["samples_per_s"] > 0
    assert "not taken (step instrumentation off)" in timing["method"]


@pytest.mark.parametrize("fw,how", [("pytorch", "torch.autocast"), ("tensorflow", "Keras policy mixed_bfloat16")])
def test_bf16_mixed_precision_is_applied_and_recorded(kit_python, tmp_path, tiny_dir, data_dir, fw, how):
    def bf16(spec):
        spec["numerics"]["precision"] = "bf16_mixed"
    spec = tiny_specs(tiny_dir, data_dir, edit=bf16)[fw]
    proc = _run_kit(kit_python(fw), write_spec(tmp_path, spec), tmp_path / "r.json", data_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["environment"]["precision"] == {"requested": "bf16_mixed", "compute_dtype": "bfloat16", "how": how}
    assert result["metrics"]["epochs"][-1]["train_loss"] > 0

"""Both kits, for real: short training runs in PyTorch and TensorFlow on the CPU."""
from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from checkout import REPO
from conftest import tiny_specs, write_spec

from reprokit.environments import datasets
from reprokit.environments.envs import ENVS
from reprokit.execute import data_step
from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.training_loop.feeding import NumpyFeeder
from reprokit.plan import model_cost
from reprokit.report.parameter_counts import parameter_counts
from reprokit.results import metrics, results
from reprokit.runners.local import LocalRunner

pytestmark = pytest.mark.slow
FRAMEWORKS = ["pytorch", "tensorflow"]


def _run_kit(python, spec_path, out, data_dir):
    return subprocess.run([str(python), "-m", "reprokit.kits.run", "--spec", str(spec_path), "--out", str(out),
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
    assert len(result["memory"]["over_steps"]) >= 2


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_memory_is_read_by_phase_warmup_apart(tiny_results, fw):
    """On a CPU, the process's resident high-water mark, reset at each phase's start: warmup (2 steps), then
    each epoch's training and evaluation; the run's peak is the highest after warmup."""
    memory = tiny_results[fw][0]["memory"]
    phases = memory["phases"]
    assert [(p["epoch"], p["phase"], p["steps"]) for p in phases] == [
        (1, "warmup", 2), (1, "train", 6), (1, "eval", 2), (2, "train", 8), (2, "eval", 2)]
    for p in phases:
        process = p["readings"]["process"]
        assert list(p["readings"]) == ["process"] and p["peak_bytes"] == process["peak_bytes"]
        assert process["source"].startswith("process resident high-water mark of the phase (VmHWM")
        assert process["peak_bytes"] > process["baseline_bytes"] > 50 * 2**20   # the framework's libraries
    after_warmup = [p["peak_bytes"] for p in phases if p["phase"] != "warmup"]
    assert memory["peak_bytes"] == memory["process_peak_bytes"] == max(after_warmup)
    assert memory["warmup_peak_bytes"] == phases[0]["peak_bytes"]
    assert memory["source"].startswith("process resident high-water mark") and "warmup left out" in memory["source"]
    assert memory["over_steps_series"] == "process resident memory (VmRSS)"


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_effective_batch_and_counts_come_from_the_tensors(tiny_results, fw):
    result, _ = tiny_results[fw]
    eff = result["effective"]
    assert eff["batch_size"] == {"configured": 32, "min": 32, "max": 32, "mean": 32.0, "short_steps": 0}
    assert eff["input"] == NumpyFeeder.READER
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
    # the kit's own count, from the outputs it observed, is the reported figure where no hook reports one
    assert result["metrics"]["reported_by"] == "the kit's own count, per sample"
    for reported, counted in zip(result["metrics"]["epochs"], result["metrics"]["counted"]):
        assert reported["train_accuracy"] == counted["train_correct"] / counted["train_samples"]
        assert (counted["train_samples"], counted["train_steps"], counted["test_samples"]) == (256, 8, 64)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_a_real_run_here_records_why_it_has_no_energy_reading(tiny_results, fw):
    """This machine's kernel shows no powercap folder: each framework's run says so instead of a figure; a
    host that has one is read by the same code as the folder above."""
    reading = tiny_results[fw][0]["timing"]["energy"]
    if Path("/sys/class/powercap").is_dir() and any(Path("/sys/class/powercap").glob("intel-rapl:*")):
        assert reading["joules"] is None or reading["joules_per_sample"] > 0
        return
    assert reading["joules"] is None and "shows no RAPL energy counter" in reading["why_not"]
    with pytest.raises(metrics.NotMeasured, match="no energy reading: this host shows no RAPL"):
        metrics.read(tiny_results[fw][0], "energy_per_sample_j")


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
@pytest.mark.parametrize("experiment", ["vgg16_cifar10_speed", "simplecnn_cifar10_memory", "resnet50_imagenet_speed"])
def test_full_size_models_match_the_published_counts(kit_python, fw, experiment):
    """torchvision's vgg16(num_classes=10) and Keras's VGG16(classes=10) both have 134,301,514; torchvision's
    resnet50() has 25,557,032, and the PyTorch kit's ResNet-50 is it, module for module."""
    from reprokit.plan.experiments import BUILTIN_DIR, load
    resolved = load(BUILTIN_DIR / f"{experiment}.toml").resolved("full")
    package = {"pytorch": "reprokit.kits.pytorch_kit.models", "tensorflow": "reprokit.kits.tensorflow_kit.models"}[fw]
    size = resolved["data"]["input_size"]
    trace = package.replace("models", "trace")
    # the PyTorch kit counts in its canonical form, which the probe's process imports without the kit's models
    counts = package.replace("models", "canonical") if fw == "pytorch" else package
    device = ", 'cpu'" if fw == "pytorch" else ""
    code = (f"import json, sys; from {package} import build; from {counts} import parameter_counts; "
            f"from {trace} import training_flops; "
            f"from reprokit.kits.contract.spec import Model, parse; "
            f"cfg = parse(Model, json.loads(sys.argv[1]), 'model'); m = build(cfg, {size}); "
            f"print(json.dumps({{**parameter_counts(m), 'flops': training_flops(m, {size}{device})}}))")
    if fw == "tensorflow" and experiment == "vgg16_cifar10_speed":
        # the posted model: keras.applications' VGG16 at the seed's size (as published, 134,301,514), and the
        # structure the quick profile rebuilds at its width, layer for layer the same at full width (at 32x32)
        code += ("; from reprokit.kits.contract.pitfalls import Pitfalls; from reprokit.kits.tensorflow_kit.models import "
                 "posted_vgg16_structure; import keras; "
                 f"posted = build(cfg, {size}, Pitfalls.of(['tf_posted_vgg16'])); "
                 "app = keras.applications.vgg16.VGG16(input_shape=(32, 32, 3), weights=None, classes=10); "
                 "mine = posted_vgg16_structure(cfg, 32); "
                 "conf = lambda m: [(type(l).__name__, {k: v for k, v in l.get_config().items() if k in "
                 "('name', 'filters', 'units', 'activation', 'padding', 'kernel_initializer', 'use_bias')}) "
                 "for l in m.layers[1:]]; "
                 "print(json.dumps({'posted': posted.count_params(), 'name': posted.name, "
                 "'same': conf(app) == conf(mine) and app.count_params() == mine.count_params()}))")
    if fw == "pytorch" and experiment in ("simplecnn_cifar10_memory", "resnet50_imagenet_speed"):
        # and PyTorch's own counter, over a real forward and backward pass, per sample
        code += ("; import torch; from torch.utils.flop_counter import FlopCounterMode; "
                 f"c = FlopCounterMode(display=False); c.__enter__(); m(torch.randn(2, 3, {size}, {size})).sum().backward(); "
                 "c.__exit__(None, None, None); print(c.get_total_flops() / 2)")
    if fw == "tensorflow" and experiment == "resnet50_imagenet_speed":
        # the stock variant's model: keras.applications' ResNet50 itself at full width, and the structure the quick
        # profile rebuilds at its width, layer for layer the same at full width
        code += ("; from reprokit.kits.tensorflow_kit.models import keras_applications_resnet_structure; import keras; "
                 f"app = keras.applications.ResNet50(input_shape=({size}, {size}, 3), weights=None, classes=1000); "
                 f"mine = keras_applications_resnet_structure(cfg, {size}); "
                 "keys = ('name', 'filters', 'kernel_size', 'strides', 'padding', 'use_bias', 'epsilon', 'momentum', "
                 "'activation', 'kernel_initializer', 'pool_size'); "
                 "conf = lambda m: [(type(l).__name__, {k: v for k, v in l.get_config().items() if k in keys}) "
                 "for l in m.layers[1:]]; "
                 "print(json.dumps({'stock': app.count_params(), 'same': conf(app) == conf(mine) and "
                 "app.count_params() == mine.count_params()}))")
    if fw == "pytorch" and experiment == "resnet50_imagenet_speed":
        # torchvision's own resnet50: the same parameter and buffer names, in the same order, of the same shapes
        code += ("; import torchvision; tv = torchvision.models.resnet50(num_classes=cfg.num_classes); "
                 "shapes = lambda m: [(k, list(v.shape)) for k, v in m.state_dict().items()]; "
                 "print(json.dumps(shapes(m) == shapes(tv)))")
    proc = subprocess.run([str(kit_python(fw)), "-c", code, json.dumps(resolved["model"])], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    if fw == "tensorflow" and experiment == "vgg16_cifar10_speed":
        posted = json.loads(lines.pop())
        assert posted == {"posted": 134_301_514, "name": "vgg16", "same": True}
    if fw == "pytorch" and experiment == "resnet50_imagenet_speed":
        assert json.loads(lines.pop()) is True
    if fw == "tensorflow" and experiment == "resnet50_imagenet_speed":
        # 25,557,032 + 26,560 conv biases trainable, and 53,120 BatchNorm statistics
        assert json.loads(lines.pop()) == {"stock": 25_636_712, "same": True}
    if fw == "pytorch" and experiment in ("simplecnn_cifar10_memory", "resnet50_imagenet_speed"):
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
    if experiment == "resnet50_imagenet_speed":
        assert counts["trainable"] == 25_557_032             # torchvision.models.resnet50()
        assert round(flops["forward"] / 2e9, 2) == 4.09     # its published 4.09 G multiply-accumulates


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


@pytest.mark.parametrize("fw,precision,how", [
    ("pytorch", "bf16_mixed", "torch.autocast"), ("tensorflow", "bf16_mixed", "Keras policy mixed_bfloat16"),
    ("pytorch", "fp16_mixed", "torch.autocast with torch.amp.GradScaler"),
    ("tensorflow", "fp16_mixed", "Keras policy mixed_float16")])
def test_mixed_precision_is_applied_and_recorded(kit_python, tmp_path, tiny_dir, data_dir, fw, precision, how):
    """bf16, and fp16 with dynamic loss scaling (tuned's precision on a GPU without bf16), on the CPU."""
    def mixed(spec):
        spec["numerics"]["precision"] = precision
    spec = tiny_specs(tiny_dir, data_dir, edit=mixed)[fw]
    proc = _run_kit(kit_python(fw), write_spec(tmp_path, spec), tmp_path / "r.json", data_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "r.json").read_text())
    dtype = "bfloat16" if precision == "bf16_mixed" else "float16"
    # computed in bf16 or fp16, the loss in fp32 in both (the PyTorch kit casts the logits, as TensorFlow's does)
    recorded = result["environment"]["precision"]
    scale = recorded.pop("loss_scale")
    assert recorded == {"requested": precision, "compute_dtype": dtype, "how": how, "loss_dtype": "float32"}
    # fp16's loss scale, as the framework's own scaler holds it after training (a power of two); none in bf16
    assert scale is None if precision == "bf16_mixed" else scale >= 1 and math.log2(scale).is_integer()
    # read back inside the training step: torch's autocast, the Keras model's dtype policy
    assert result["environment"]["settings"]["precision"]["value"] == f"{dtype} compute, float32 variables"
    assert result["metrics"]["epochs"][-1]["train_loss"] > 0


def test_the_posted_tensorflow_input_reads_tfds_where_the_data_step_prepared_it(kit_python, tmp_path, posted_data):
    """The as-posted pipeline on CIFAR-10 (small archives in the official formats): the plan names TFDS's
    dataset, prepared by the data step, and the kit reads it with tfds.load('cifar10'), batches of one."""
    from conftest import TINY

    from reprokit.plan.experiments import load
    from reprokit.plan.plan import Options, specs_for
    from reprokit.results.provenance import code
    toml = (TINY.replace('dataset = "learnable"', 'dataset = "cifar10"')
            .replace("train_samples = 256", "train_samples = 64").replace("test_samples = 64", "test_samples = 16"))
    (tmp_path / "tiny.toml").write_text(toml + '\n[variants.as_posted]\ndescription = "the posted input"\n'
                                        'pitfalls = ["tf_batch_of_one"]\n')
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("tensorflow",),
                   data=data_step.Preparing(posted_data, allow_download=False), variants=("as_posted",))
    (planned,) = specs_for(load(tmp_path / "tiny.toml"), opts,
                           lambda fw: {"lock": None, "lock_sha256": None, "image": None}, code())
    spec = planned.to_dict()
    assert spec["data"]["tfds"] == datasets.tfds_prepared(posted_data) is not None
    proc = _run_kit(kit_python("tensorflow"), write_spec(tmp_path, spec), tmp_path / "r.json", posted_data)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert results.problems(result) is None
    assert result["effective"]["input"].startswith("tfds.load('cifar10') from the TFDS dataset the data step prepared")
    assert result["effective"]["batch_size"]["max"] == 1 and result["effective"]["train_steps_per_epoch"] == [2, 2]
    assert "effective-batch-size" in [f["code"] for f in result["findings"]]
    # the loader settings from the pipeline's own stages: the posted serial map over TFDS's, which decodes with
    # autotuned parallelism
    loader = result["environment"]["settings"]["loader.workers"]
    assert loader["value"] == "autotune" and loader["source"].startswith("the tf.data pipeline's stages: Map <- ")
    assert "(-1)" in loader["source"]



@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_the_bench_pools_rounds_of_fresh_processes(kit_python, tmp_path, tiny_dir, data_dir, fw, capsys):
    """nox -s bench's throughput part for real, on the tiny model: 6 rounds from two reprokit.kits.bench processes of 3,
    each process's rounds in distinct orders of one shuffled block, every side measured, the kit's own figure
    checked by the outer clock, the seeds kept so each process's draws can be made again. The tiny data's epoch is 8
    steps: 1 + 10 steps take two epochs of 6, whose windows both clocks add up."""
    from benchmarks import bench_kit_overhead

    runner = LocalRunner(ENVS, data_dir, "cpu")
    runner.prepare({fw})
    args = SimpleNamespace(min_rounds=6, max_rounds=6, undecided_rounds=6, per_process=3, target=0.02, warmup=1, steps=10)
    spec = RunSpec.from_dict(tiny_specs(tiny_dir, data_dir)[fw])
    (m,) = bench_kit_overhead.throughput(fw, runner, [spec], tmp_path, args)
    assert m["processes"] == 2 and len(m["seeds"]) == 2 and len(m["rounds"]) == 6
    assert (m["epochs"], m["steps"]) == (2, 11)
    for part in (m["rounds"][:3], m["rounds"][3:]):
        assert len({tuple(r["order"]) for r in part}) == 3
    for r in m["rounds"]:
        assert sorted(r["order"]) == ["bare", "bare again", "kit", "untimed"]
        assert min(r["kit_sps"], r["untimed_sps"], r["bare_sps"], r["again_sps"]) > 0
        assert r["null_ratio"] == r["bare_sps"] / r["again_sps"]
        assert abs(r["outer_sps"] / r["kit_sps"] - 1) < 0.15     # the kit's own figure is the outer clock's
    for name in ("ratio", "null_ratio"):
        lo, hi, coverage = m[f"interval_{name}"]
        assert lo <= m[f"median_{name}"] <= hi and coverage >= 0.95
    shown = capsys.readouterr().out
    assert all(f"reprokit.kits.bench seed {seed}" in shown for seed in m["seeds"]) and "6 rounds from 2 process(es)" in shown


@pytest.mark.parametrize("framework, pitfalls, sizes", [
    ("pytorch", [], [32, 16]), ("tensorflow", [], [32, 16]),
    ("pytorch", ["pt_cpu_resize_dataloader"], [32, 16]),
    ("tensorflow", ["tf_batch_of_one", "tf_validation_single_examples"], [1]),
])
def test_the_warmup_runs_every_evaluation_shape_first(kit_python, tmp_path, tiny_dir, data_dir, framework,
                                                       pitfalls, sizes):
    """80 test images in batches of 32 end in a batch of 16: its shape meets the autotuner and the tracer in
    the warmup, not in epoch 1's evaluation phase, whatever reads the batches (the kit, a posted pipeline)."""
    (tiny_dir / "tiny.toml").write_text((tiny_dir / "tiny.toml").read_text().replace("test_samples = 64",
                                                                                    "test_samples = 80"))
    spec = tiny_specs(tiny_dir, data_dir)[framework]
    spec["pitfalls"] = pitfalls
    proc = _run_kit(kit_python(framework), write_spec(tmp_path, spec), tmp_path / "r.json", data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["timing"]["warmup_eval_batch_sizes"] == result["effective"]["eval_batch_sizes"] == sizes
    assert result["effective"]["test_samples"] == 80
    assert "shape-after-warmup" not in {f["code"] for f in result["findings"]}


def test_tensorflows_batches_converted_together_are_the_batches_one_at_a_time(kit_python, tmp_path, data_dir):
    """The TensorFlow kit converts up to 8 training batches at a time (one eager op between its steps where two
    per step cost 2% of a VGG step): every epoch's batches are the same tensors in the same order as one at a time
    gives, a short last batch and an epoch's step cap included, and nothing is read beyond the cap."""
    from conftest import TINY
    (tmp_path / "tiny.toml").write_text(TINY.replace("drop_last = true", "drop_last = false")
                                        .replace("train_samples = 256", "train_samples = 600"))

    def capped(spec: dict) -> None:
        spec["train"]["max_steps_per_epoch"] = 13
    paths = []
    for name, edit in (("whole", None), ("capped", capped)):
        (tmp_path / name).mkdir()
        paths.append(write_spec(tmp_path / name, tiny_specs(tmp_path, data_dir, edit=edit)["tensorflow"]))
    proc = subprocess.run([str(kit_python("tensorflow")), str(REPO / "tests" / "together_driver.py"), str(data_dir),
                           *map(str, paths)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    whole, cap = json.loads(proc.stdout.splitlines()[-1])
    assert whole["together"] == cap["together"] == 8
    for epoch in ("1", "2"):
        assert whole[epoch] == {"batches": 19, "one_by_one": 19, "sizes": [32] * 18 + [24], "same": True}
        assert cap[epoch] == {"batches": 13, "one_by_one": 13, "sizes": [32] * 13, "same": True}

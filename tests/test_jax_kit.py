"""The JAX kit, for real: a short run through reprokit.kits.run on the CPU, its FLOPs against the PyTorch kit's on both
seed models, and a Flax builder of the wrong type refused in one sentence.

One kit run, one JAX and one PyTorch process for the counts, started side by side (the JAX process's
import and XLA's compilation dominate the time).
"""
from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from checkout import REPO
from conftest import TINY, write_spec

from reprokit.execute import data_step
from reprokit.kits.contract import settings as settings_lib
from reprokit.plan import model_cost
from reprokit.plan.experiments import BUILTIN_DIR, load
from reprokit.plan.plan import Options, specs_for
from reprokit.results import results
from reprokit.results.provenance import code

pytestmark = pytest.mark.slow
SEED_MODELS = ("vgg16_cifar10_speed", "simplecnn_cifar10_memory")

# 256 samples in batches of 48, the last one kept: five full batches and one of 16 per epoch.
JAX_TINY = (TINY.replace('frameworks = ["pytorch", "tensorflow"]', 'frameworks = ["pytorch", "tensorflow", "jax"]')
            .replace("batch_size = 32", "batch_size = 48").replace("drop_last = true", "drop_last = false")
            .replace("epochs = 2", "epochs = 1"))

# The training FLOPs of the quick profile's models, by experiment, printed as JSON by each kit's own trace.
JAX_COUNTS = textwrap.dedent("""\
    import json, sys
    from flax import nnx
    from reprokit.kits.contract.spec import Model, parse
    from reprokit.kits.jax_kit import models, trace
    out = {}
    for name, (cfg, size) in json.loads(sys.argv[1]).items():
        model = models.build_model(parse(Model, cfg, "model"), size, nnx.Rngs(0))
        out[name] = {**models.parameter_counts(model), "flops": trace.training_flops(model, size)}
    print(json.dumps(out))
    """)
PYTORCH_COUNTS = textwrap.dedent("""\
    import json, sys
    from reprokit.kits.contract.spec import Model, parse
    from reprokit.kits.pytorch_kit import models, trace
    out = {name: trace.training_flops(models.build(parse(Model, cfg, "model"), size), size, "cpu")
           for name, (cfg, size) in json.loads(sys.argv[1]).items()}
    print(json.dumps(out))
    """)
WRONG_TYPE = textwrap.dedent("""\
    import sys
    from reprokit.kits.framework_free import custom
    from reprokit.kits.contract.spec import Model
    from reprokit.kits.jax_kit import models

    sys.path.insert(0, sys.argv[1])
    try:
        models.build_model(Model("custom", 10, builders={"jax": "wrong_type:build"}), 32, None)
    except custom.BadModel as exc:
        print(exc)
    """)


def _models() -> dict[str, tuple[dict, int]]:
    out = {}
    for name in SEED_MODELS:
        resolved = load(BUILTIN_DIR / f"{name}.toml").resolved("quick")
        out[name] = (resolved["model"], resolved["data"]["input_size"])
    return out


def _jax_spec(tmp: Path, data_dir: Path) -> dict:
    (tmp / "tiny.toml").write_text(JAX_TINY)
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("jax",),
                   data=data_step.Preparing(data_dir, allow_download=False))
    planned = specs_for(load(tmp / "tiny.toml"), opts, lambda fw: {"lock": None, "lock_sha256": None,
                                                                   "image": None}, code())
    return next(p.to_dict() for p in planned)


@pytest.fixture(scope="module")
def jax_kit(kit_python, tmp_path_factory, data_dir):
    """The kit's run of the tiny experiment, and both kits' counts of the seed models, made side by side."""
    work = tmp_path_factory.mktemp("jax")
    (work / "wrong_type.py").write_text("def build(options, input_size, num_classes):\n    return {'a': 'dict'}\n")
    counted = json.dumps(_models())
    jax, torch = kit_python("jax"), kit_python("pytorch")
    started = [subprocess.Popen([str(python), "-c", script, arg], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
               for python, script, arg in ((jax, JAX_COUNTS, counted), (torch, PYTORCH_COUNTS, counted),
                                           (jax, WRONG_TYPE, str(work)))]
    spec = _jax_spec(work, data_dir)
    run = subprocess.run([str(jax), "-m", "reprokit.kits.run", "--spec", str(write_spec(work, spec)), "--out",
                          str(work / "result.json"), "--data-dir", str(data_dir)], cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    outputs = [p.communicate(timeout=600) for p in started]
    for p, (_, err) in zip(started, outputs):
        assert p.returncode == 0, err[-3000:]
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return {"result": json.loads((work / "result.json").read_text()), "jax": json.loads(outputs[0][0]),
            "pytorch": json.loads(outputs[1][0]), "wrong_type": outputs[2][0].strip()}


def test_the_run_is_complete_and_measured(jax_kit):
    result = jax_kit["result"]
    assert results.problems(result) is None
    assert result["status"] == "ok" and result["framework"] == "jax"
    env = result["environment"]
    assert env["framework"] == "jax" and env["device"] == "cpu" and env["cpu_threads"]["intra_op"] == 1
    timing = result["timing"]
    assert timing["samples_per_s"] > 0 and timing["step_s"]["n"] == 6 - 2     # 6 steps, 2 of them warmup
    assert result["effective"]["batch_size"]["short_steps"] == 1                # the partial last batch ran
    epoch = result["metrics"]["epochs"][0]
    assert epoch["train_loss"] > 0 and 0 <= epoch["test_accuracy"] <= 1
    # memory by phase: the process's high-water mark, warmup apart
    phases = result["memory"]["phases"]
    assert [(p["phase"], p["steps"]) for p in phases] == [("warmup", 2), ("train", 4), ("eval", 2)]
    assert all(p["readings"]["process"]["peak_bytes"] > p["readings"]["process"]["baseline_bytes"] for p in phases)


def test_every_batch_shape_is_compiled_in_the_warmup(jax_kit):
    compiled = jax_kit["result"]["environment"]["compilation"]["compiled"]
    assert {c["phase"] for c in compiled} == {"warmup"} and all(c["seconds"] > 0 for c in compiled)
    train = sorted(c["batch_shape"][0] for c in compiled if c["step"] == "train")
    assert train == [16, 48]                       # the full batch and the partial last one, before either ran
    spec = jax_kit["result"]["spec"]
    size, samples = spec["train"]["eval_batch_size"], spec["data"]["test_samples"]
    evaluated = {size, samples % size} - {0}            # every evaluation batch size, the last one's too
    assert evaluated <= {c["batch_shape"][0] for c in compiled if c["step"] == "eval"}


def test_settings_are_read_back_under_every_key(jax_kit):
    settings = jax_kit["result"]["environment"]["settings"]
    assert set(settings) == set(settings_lib.KEYS)
    assert settings["execution"]["value"] == "jax.jit (XLA)"
    assert settings["data_layout"]["value"] == "NHWC"
    assert settings["precision"]["value"] == "float32 compute, float32 variables"
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in settings["allocator.config"]["value"]
    # XLA reads its flags once and has no call to read them back: the source says it is a reproduction
    assert settings["threads.intra_op"]["value"] == 1 and "declared reproduction" in settings["threads.intra_op"]["source"]
    assert settings["threads.inter_op"]["value"] is None and settings["threads.inter_op"]["not_reported"]


def test_flops_and_parameters_of_the_run_match_the_hosts_formula(jax_kit):
    result = jax_kit["result"]
    model, size = result["spec"]["model"], result["spec"]["data"]["input_size"]
    assert result["model"]["flops_per_sample"] == model_cost.training_flops_per_sample(model, size)
    assert result["model"]["parameters"] == model_cost.parameter_counts(model, size)


@pytest.mark.parametrize("experiment", SEED_MODELS)
def test_flops_match_the_pytorch_kits_within_a_thousandth(jax_kit, experiment):
    jax, torch = jax_kit["jax"][experiment]["flops"], jax_kit["pytorch"][experiment]
    for part in ("forward", "backward", "training"):
        assert abs(jax[part] - torch[part]) <= 1e-3 * torch[part], (part, jax[part], torch[part])
    cfg, size = _models()[experiment]
    assert {k: jax_kit["jax"][experiment][k] for k in ("total", "trainable")} == model_cost.parameter_counts(cfg, size)


def test_a_flax_builder_of_the_wrong_type_is_one_sentence(jax_kit):
    assert jax_kit["wrong_type"] == "the JAX model builder wrong_type:build returned a dict, not a flax.nnx.Module"

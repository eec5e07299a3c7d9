"""A user's own experiment, from their own folder, with their own models in both frameworks."""
from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import textwrap

import pytest
from checkout import REPO
from conftest import TINY

from reprokit.report import settings_table

pytestmark = pytest.mark.slow

MODELS = textwrap.dedent('''\
    """Two hand-written models of the same small CNN: the PyTorch one ends in a softmax by mistake, and its
    builder asks torch for deterministic algorithms (for reproducible runs), which TensorFlow is not asked."""


    def torch_model(options, input_size, num_classes):
        import torch
        from torch import nn
        torch.use_deterministic_algorithms(True)      # a framework default changed in the user's own code
        width = options["width"]
        return nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(width, num_classes),
            nn.Softmax(dim=1),     # planted: CrossEntropyLoss expects logits
        )


    def keras_model(options, input_size, num_classes):
        import keras
        from keras import layers
        width = options["width"]
        inputs = keras.Input((input_size, input_size, 3))
        x = layers.Conv2D(width, 3, padding="same", activation="relu")(inputs)
        x = layers.MaxPooling2D(2)(x)
        x = layers.Conv2D(width, 3, padding="same", activation="relu")(x)
        x = layers.GlobalAveragePooling2D()(x)
        return keras.Model(inputs, layers.Dense(num_classes)(x))
    ''')


def _user_experiment(folder):
    spec = TINY.replace('name = "tiny"', 'name = "my_case"')
    model_start, model_end = spec.index("[model]"), spec.index("[data]")
    spec = (spec[:model_start] + textwrap.dedent('''\
        [model]
        name = "custom"
        num_classes = 10
        width_multiplier = 1.0
        pytorch = "my_case_models:torch_model"
        tensorflow = "my_case_models:keras_model"
        options = { width = 8 }

        ''') + spec[model_end:])
    (folder / "my_case.toml").write_text(spec)
    (folder / "my_case_models.py").write_text(MODELS)
    # its declared twin: the same experiment, the determinism it changes declared by its settings key
    (folder / "my_case_declared.toml").write_text(spec.replace('name = "my_case"', 'name = "my_case_declared"') + (
        '\n[[differences]]\nfield = "deterministic algorithms"\nkey = "determinism.ops"\npytorch = "on"\n'
        'tensorflow = "off"\nwhy = "the PyTorch builder asks for them"\n'))


def test_own_experiment_runs_and_the_report_names_the_undeclared_pitfall(kit_python, tmp_path):
    kit_python("pytorch"), kit_python("tensorflow")
    folder = tmp_path / "mine"
    folder.mkdir()
    _user_experiment(folder)
    proc = subprocess.run(
        [sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(folder), "--only", "my_case",
         "--only", "my_case_declared", "--variants", "fixed,as_posted",
         "--backend", "local", "--state-dir", str(tmp_path / "state"), "--reports-dir", str(tmp_path / "reports"),
         "--data-dir", str(tmp_path / "data"), "--name", "mine"],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    every = [json.loads(p.read_text()) for p in (tmp_path / "reports" / "mine" / "results").glob("*.json")]
    results = {r["framework"]: r for r in every if r["experiment"] == "my_case"}
    codes = {fw: [f["code"] for f in r["findings"]] for fw, r in results.items()}
    assert codes == {"pytorch": ["probabilities-into-logit-loss"], "tensorflow": []}
    assert "user_code_sha256" in results["pytorch"]["provenance"]
    report = (tmp_path / "reports" / "mine" / "report.md").read_text()
    assert "probabilities-into-logit-loss" in report and "softmax applied twice" in report
    # The determinism its builder switched on, read back from torch: undeclared, and declared in its twin
    assert ("- both, `fixed`: **settings-differ** (warning): deterministic algorithms (determinism.ops): PyTorch on, "
            "TensorFlow off (undeclared: ") in report
    assert ("- both, `fixed`: **settings-differ** (info): deterministic algorithms (determinism.ops): PyTorch on, "
            "TensorFlow off (declared: \\[\\[differences\\]\\] deterministic algorithms)") in report
    for name, mark in (("my_case", "**undeclared**"), ("my_case_declared",
                                                       r"declared (\[\[differences\]\] deterministic algorithms)")):
        by_fw = {r["framework"]: [r] for r in every if r["experiment"] == name}
        table = settings_table.section({"fixed": by_fw})
        row = next(line for line in table.splitlines() if "(`determinism.ops`)" in line)
        assert [c.strip() for c in row.strip("|").split("|")][1:] == ["all", "on", "off", mark]
    # The certificate sees it too: same weights, different outputs, and says so in one sentence.
    cert = json.loads((tmp_path / "reports" / "mine" / "certificate-my_case-fixed.json").read_text())
    checks = {c["name"]: c["passed"] for c in cert["checks"]}
    assert cert["status"] == "fail" and checks["layers"] is True and checks["logits"] is False
    assert checks["outputs"] is False and checks["layers_without_parameters"] is False
    assert cert["message"] == ("my_case_models:torch_model returns probabilities, not logits: its last layer 8 "
                               "(Softmax) makes every row non-negative and sum to 1, and the PyTorch kit's loss "
                               "takes logits")


FLAX_MODELS = textwrap.dedent('''\
    """The same small CNN in PyTorch, Keras and Flax NNX, and a Flax builder that returns no model."""


    def torch_model(options, input_size, num_classes):
        from torch import nn
        width = options["width"]
        return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(width, num_classes))


    def keras_model(options, input_size, num_classes):
        import keras
        from keras import layers
        inputs = keras.Input((input_size, input_size, 3))
        x = layers.Conv2D(options["width"], 3, padding="same", activation="relu")(inputs)
        return keras.Model(inputs, layers.Dense(num_classes)(layers.GlobalAveragePooling2D()(x)))


    def flax_model(options, input_size, num_classes):
        import jax.numpy as jnp
        from flax import nnx

        class Small(nnx.Module):
            def __init__(self, rngs):
                self.conv = nnx.Conv(3, options["width"], (3, 3), padding="SAME", rngs=rngs)
                self.dense = nnx.Linear(options["width"], num_classes, rngs=rngs)

            def __call__(self, x):
                return self.dense(jnp.mean(nnx.relu(self.conv(x)), axis=(1, 2)))

        return Small(nnx.Rngs(0))


    def flax_wrong(options, input_size, num_classes):
        return "a model"
    ''')


def flax_experiment(folder, name="flaxcase", frameworks=("pytorch", "tensorflow"), jax="flax_model",
                    built=("pytorch", "tensorflow", "jax")):
    """A user's folder whose custom model has a builder in each framework ``built`` (JAX: a Flax NNX module), and
    runs in ``frameworks`` unless --frameworks says otherwise."""
    spec = TINY.replace('name = "tiny"', f'name = "{name}"').replace(
        'frameworks = ["pytorch", "tensorflow"]', f"frameworks = {list(frameworks)!r}".replace("'", '"'))
    builders = {"pytorch": "torch_model", "tensorflow": "keras_model", "jax": jax}
    start, end = spec.index("[model]"), spec.index("[data]")
    lines = "".join(f'{fw} = "flax_models:{builders[fw]}"\n' for fw in built)
    (folder / f"{name}.toml").write_text(spec[:start] + '[model]\nname = "custom"\nnum_classes = 10\n'
                                         'width_multiplier = 1.0\n' + lines + 'options = { width = 8 }\n\n' + spec[end:])
    (folder / "flax_models.py").write_text(FLAX_MODELS)


def test_a_flax_builder_runs_beside_the_others_and_the_report_has_a_column_each(kit_python, tmp_path):
    for fw in ("pytorch", "tensorflow", "jax"):
        kit_python(fw)
    folder = tmp_path / "mine"
    folder.mkdir()
    flax_experiment(folder)
    flax_experiment(folder, "flaxwrong", ("jax",), "flax_wrong", ("jax",))

    def reproduce(*args):
        return subprocess.run(
            [sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(folder), "--variants", "fixed",
             "--epochs", "1", "--max-steps", "3", "--backend", "local", "--claims", "none", "--no-certify",
             "--state-dir", str(tmp_path / "state"), "--reports-dir", str(tmp_path / "reports"),
             "--data-dir", str(tmp_path / "data"), *args], cwd=REPO, capture_output=True, text=True, timeout=600)

    # its own frameworks are PyTorch and TensorFlow; --frameworks adds JAX, whose builder it names
    planned = reproduce("--only", "flaxcase", "--frameworks", "pytorch,jax", "--dry-run")
    assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-3000:]
    assert re.findall(r" flaxcase +(\w+) ", planned.stdout) == ["pytorch", "jax"]
    proc = reproduce("--only", "flaxcase", "--frameworks", "pytorch,tensorflow,jax", "--name", "three")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (tmp_path / "reports" / "three" / "report.md").read_text()
    header = next(line for line in report.splitlines() if line.startswith("|") and "PyTorch / JAX" in line)
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "", "PyTorch", "TensorFlow", "JAX", "PyTorch / TensorFlow", "PyTorch / JAX", "better"]
    throughput = next(line for line in report.splitlines() if line.startswith("| throughput"))
    cells = [c.strip() for c in throughput.strip("|").split("|")]
    pt, tf, jax = (float(re.match(r"[\d,.]+", c)[0].replace(",", "")) for c in cells[1:4])
    # each ratio is the reference over that framework, its column's own figure
    shown = [float(re.match(r"([\d.]+)x", c)[1]) for c in cells[4:6]]
    assert shown == pytest.approx([pt / tf, pt / jax], abs=0.011), cells     # the cells are rounded
    with open(tmp_path / "reports" / "three" / "summary.csv") as f:
        assert {row["framework"] for row in csv.DictReader(f)} == {"pytorch", "tensorflow", "jax"}
    # A Flax builder that returns no nnx.Module: one sentence, from the build, before any step is timed
    wrong = reproduce("--only", "flaxwrong", "--frameworks", "jax", "--name", "wrong")
    assert ("FAILED (error: BadModel: the JAX model builder flax_models:flax_wrong returned a str, not a "
            "flax.nnx.Module)") in wrong.stdout, wrong.stdout[-3000:] + wrong.stderr[-3000:]

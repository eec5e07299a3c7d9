"""The certificate on the models two users' scripts train, captured by the probe (reprokit/certify/script_certificate.py).

Real scripts from tests/user_scripts/, real frameworks, the local runner: each script runs under the probe to
its first optimizer step, where its model is put into the certificate's canonical form from the object itself.
The same model written in two scripts passes; a setting changed after construction (a BatchNorm epsilon) is seen;
a script that trains two models or none is named and stops the certificate.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from checkout import REPO

from reprokit.certify.script_certificate import certify_scripts
from reprokit.environments.envs import ENVS
from reprokit.execute import data_step
from reprokit.plan import script_plan
from reprokit.plan.experiments import from_scripts, load
from reprokit.plan.plan import Options
from reprokit.results.provenance import code
from reprokit.runners.local import LocalRunner

SCRIPTS = Path(__file__).parent / "user_scripts"
pytestmark = pytest.mark.slow


def _pair(exp, data_dir: Path) -> dict[str, dict]:
    return _pair_of(exp, exp.scripts, data_dir)


def _pair_of(exp, scripts: dict[str, dict], data_dir: Path) -> dict[str, dict]:
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("pytorch", "tensorflow"),
                   data=data_step.Preparing(data_dir, allow_download=False))
    specs = script_plan.specs_for(exp.name, scripts, opts, lambda fw: {"lock": None, "lock_sha256": None,
                                                                       "image": None}, code())
    return {s.framework: s.to_dict() for s in specs}         # the certificate reads specs as JSON


def _checks(cert: dict) -> dict[str, dict]:
    return {c["name"]: c for c in cert["checks"]}


def test_a_batchnorm_epsilon_changed_after_construction_is_seen(kit_python, tmp_path, data_dir, monkeypatch):
    kit_python("pytorch"), kit_python("tensorflow")
    pair = _pair(load(SCRIPTS / "bn_pair.toml"), data_dir)
    runner = LocalRunner(ENVS, data_dir, "cpu")
    same = certify_scripts(pair, runner, tmp_path / "same")
    assert same["status"] == "pass", same["summary"]
    checks = _checks(same)
    # BatchNorm's moving statistics counted in both, as Keras counts them
    assert same["captured"] == {"pytorch": ["Sequential with 338 parameters"],
                                "tensorflow": ["Sequential with 338 parameters"]}
    assert checks["layers"]["numbers"]["parameters"] == {"pytorch": 338, "tensorflow": 338}
    assert checks["logits"]["numbers"]["fp32 train"]["relative"] < 1e-5
    assert "keras.optimizers.Adam" in checks["optimizer"]["evidence"] and checks["optimizer"]["passed"]
    assert checks["loss_trajectory"]["passed"] is None and "not checked for scripts" in checks["loss_trajectory"][
        "evidence"]
    assert "first_parting_layer" not in checks           # nothing parts: nothing is named
    # the same files, the epsilon set on the built model: the captured object shows it
    monkeypatch.setenv("REPROKIT_TEST_BN_EPS", "1e-3")
    changed = certify_scripts(pair, runner, tmp_path / "changed")
    checks = _checks(changed)
    assert changed["status"] == "fail" and checks["layers"]["passed"] and not checks["logits"]["passed"]
    assert checks["logits"]["numbers"]["fp32 train"]["relative"] > 1e-2
    assert changed["summary"].startswith("NOT the same model: logits:")
    # where: the layer whose output parts first, and the setting of it that differs, read from both objects
    parting = checks["first_parting_layer"]
    assert parting["evidence"].startswith(
        "first parts at PyTorch 1 (BatchNorm2d) / TensorFlow batch_normalization (BatchNormalization): output "
        "differs "), parting["evidence"]
    # In evaluation mode the epsilons part the outputs by about 1e-3 / (2 x running variance), and the captured
    # running variance is PyTorch's after the first shuffled batch's forward pass: near the 1e-4 tolerance, so
    # either mode may be where they part first; the setting named is the same
    assert parting["evidence"].removesuffix(" (in training mode: the evaluation-mode outputs agree)").endswith(
        "; settings that differ: epsilon 0.001 vs 1e-05"), parting["evidence"]
    assert parting["numbers"]["precision"] == "fp32" and changed["summary"].endswith(parting["evidence"])


def test_a_script_that_trains_two_models_or_none_stops_the_certificate(kit_python, tmp_path, data_dir):
    kit_python("pytorch"), kit_python("tensorflow")
    runner = LocalRunner(ENVS, data_dir, "cpu")
    two = certify_scripts(_pair(from_scripts("two", {"pytorch": SCRIPTS / "faults" / "two_models.py",
                                                     "tensorflow": SCRIPTS / "keras_bn.py"}), data_dir),
                          runner, tmp_path / "two")
    assert two["status"] == "fail" and not two["checks"]
    assert two["message"] == ("the PyTorch side: the script's optimizer steps more than one model (Linear with 18 "
                              "parameters, Linear with 40 parameters); the certificate compares one model per script "
                              "and stops here"), two["message"]
    none = certify_scripts(_pair(from_scripts("none", {"pytorch": SCRIPTS / "faults" / "no_training.py",
                                                       "tensorflow": SCRIPTS / "keras_bn.py"}), data_dir),
                           runner, tmp_path / "none")
    assert none["status"] == "error" and none["message"] == (
        "the PyTorch script trained no model the certificate could capture: no training step observed (no optimizer "
        "step ran)"), none["message"]


def test_the_probes_process_never_imports_the_kits_pitfall_module(kit_python, tmp_path, data_dir):
    """What the probe reports of a script comes from the frameworks, never from the kit's pitfall switches: the
    module that holds them is not even imported, in a measured run or a certificate side, in either framework."""
    pair = _pair(load(SCRIPTS / "twin_pair.toml"), data_dir)
    from reprokit.environments import datasets
    datasets.prepare({"dataset": pair["pytorch"]["data"]["dataset"], "train_samples": None, "test_samples": None,
                      "seed": 0}, data_dir, allow_download=False)
    for fw, extra in (("pytorch", ["--certify"]), ("tensorflow", ["--certify", "--weights-from",
                                                                  str(tmp_path / "pytorch-certify")]),
                      ("pytorch", []), ("tensorflow", [])):
        spec = tmp_path / f"{fw}.json"
        spec.write_text(json.dumps(pair[fw]))
        out = tmp_path / f"{fw}{'-certify' if extra else ''}" / "result.json"
        proc = subprocess.run([str(kit_python(fw)), "-X", "importtime", "-m", "reprokit.kits.probe", "--spec", str(spec),
                               "--out", str(out), "--data-dir", str(data_dir), "--script-dir", str(SCRIPTS), *extra],
                              cwd=REPO, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.returncode == 0, proc.stderr[-3000:]
        imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time")}
        assert "reprokit.kits.observation.observe" in imported and "reprokit.kits.contract.pitfalls" not in imported, (fw, extra)
        if extra:
            assert json.loads((out.parent / "side.json").read_text())["status"] == "ok"


def test_the_seed_004_posts_code_is_certified_apart_where_the_posts_differ(kit_python, tmp_path, data_dir):
    """The seed's own scripts, verbatim with their shims (reprokit/kits/experiments/seed004): the captured models show
    what the post's readers found by hand - PyTorch reuses one BatchNorm per width and ends in softmax into
    CrossEntropyLoss, Keras has one BatchNorm per convolution and a Dense more - and nothing that is not there
    (Keras's Sequential.add leaves stale graph nodes that must not read as shared layers)."""
    from reprokit.plan.experiments import BUILTIN_DIR
    kit_python("pytorch"), kit_python("tensorflow")
    exp = load(BUILTIN_DIR / "simplecnn_cifar10_memory.toml")
    cert = certify_scripts(_pair_of(exp, exp.script_variants["verbatim"], data_dir),
                           LocalRunner(ENVS, data_dir, "cpu"), tmp_path)
    checks = _checks(cert)
    assert cert["status"] == "fail" and not checks["layers"]["passed"]
    layers = checks["layers"]["evidence"]
    assert "batchnorm layers: PyTorch 4, TensorFlow 10" in layers and "dense layers: PyTorch 1, TensorFlow 2" in layers
    assert "PyTorch uses one set of weights at several places: Batchnorm_1 (BatchNorm2d) at 2 places" in layers
    assert "TensorFlow uses one set of weights" not in layers
    # the post calls model.eval() once and train() never: the captured modules say so, and as built its
    # dropout drops whole channels where Keras's drops elements
    modes = checks["modes"]["evidence"]
    assert not checks["modes"]["passed"] and modes.startswith(
        "PyTorch's model trained with 8 layer(s) in evaluation mode (Batchnorm_1 (BatchNorm2d), Batchnorm_2 "
        "(BatchNorm2d), Batchnorm_3 (BatchNorm2d), Batchnorm_4 (BatchNorm2d) and 4 more): dropout off, BatchNorm on "
        "its running statistics; as built (every layer in training mode), a layer without parameters differs"), modes
    assert ("PyTorch has padding (1, 1, 1, 1) (top, bottom, left, right); dropout rate 0.3, one mask value shared "
            "over H,W" in modes and "TensorFlow has padding (1, 1, 1, 1) (top, bottom, left, right); dropout rate "
            "0.3, per element" in modes), modes
    assert checks["outputs"]["evidence"].startswith(
        "the PyTorch script's SimpleCNN returns probabilities (every row of its outputs is non-negative and sums to "
        "1; the last layer it calls is dropout1d (Dropout)) into a PyTorch loss that takes logits"), checks["outputs"]

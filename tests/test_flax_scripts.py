"""A Flax NNX example on absl flags and an ml_collections config, certified against a PyTorch twin (the corpus's
tests/corpus/flax_scripts/).

The pair is planned as a user gives it on the command line (`--script "jax=main.py --workdir=out
--config=configs/default.py"`, the example's requirements.txt resolved against the JAX lock, its MNIST file given
with --data) and certified through the local runner, each script under the probe to its first training step: the
twin's certificate passes, and the planted twin's (its BatchNorm's epsilon 1e-3, Flax's 1e-5) fails, naming that
layer and that setting, read from both built objects. A Flax linen script of the same model (a TrainState, a
jitted step of jax.value_and_grad, its BatchNorm statistics beside its parameters) certifies against the same twin:
the probe captures the linen module its step applies and the variables it applies it with.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from checkout import REPO

from reprokit import cli
from reprokit.certify.script_certificate import certify_scripts
from reprokit.environments import requirement_sets
from reprokit.environments.envs import ENVS
from reprokit.execute import compose
from reprokit.kits.framework_free import stand_ins
from reprokit.runners.local import LocalRunner

CORPUS = REPO / "tests" / "corpus" / "flax_scripts"
pytestmark = pytest.mark.slow


def _pair(twin: str, data_dir: Path, mnist: Path, state: Path,
          jax_script: str = f"{CORPUS / 'main.py'} --workdir=out --config=configs/default.py") -> dict[str, dict]:
    parsed = cli.parse(["--script", f"pytorch={CORPUS / 'twins' / twin}", "--script", f"jax={jax_script}",
                        "--data", f"jax:./data/mnist={mnist}", "--frameworks", "pytorch,jax", "--backend", "local",
                        "--profile", "quick", "--data-dir", str(data_dir), "--state-dir", str(state)])
    pair = {s.framework: s.to_dict() for s in compose.build(parsed).specs}
    requirement_sets.install_all(pair.values())       # as the command does before any run (absl, ml_collections)
    return pair


@pytest.fixture(scope="module")
def mnist(kit_python, tmp_path_factory) -> Path:
    """The examples' data_dir: MNIST's arrays as mnist.npz (the stand-in's)."""
    kit_python("pytorch"), kit_python("jax")
    mnist = tmp_path_factory.mktemp("flax_scripts") / "mnist"
    mnist.mkdir()
    x_train, y_train, x_test, y_test = stand_ins.generate("mnist", 256, 64, 0)
    np.savez(mnist / "mnist.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return mnist


@pytest.fixture(scope="module")
def certificates(mnist, data_dir) -> dict[str, dict]:
    """Both pairs' certificates: the twin's and the planted twin's."""
    tmp, runner = mnist.parent, LocalRunner(ENVS, data_dir, "cpu")
    made = {twin: certify_scripts(_pair(f"{twin}.py", data_dir, mnist, tmp / twin / "state"), runner,
                                  tmp / twin / "certificate")
            for twin in ("mnist_torch", "mnist_torch_planted")}
    for twin, cert in made.items():         # what -s shows of each: its verdict and its summary
        print(f"\n{twin}: {cert['status']}: {cert['summary']}")
    return made


def _checks(cert: dict) -> dict[str, dict]:
    return {c["name"]: c for c in cert["checks"]}


def test_the_flax_example_and_its_pytorch_twin_are_the_same_model(certificates):
    cert = certificates["mnist_torch"]
    assert cert["status"] == "pass", cert["summary"]
    checks = _checks(cert)
    # the nnx.Module the jitted step received, with BatchNorm's statistics in the total, as PyTorch's are counted
    assert cert["captured"] == {"pytorch": ["CNN with 105,930 parameters"], "jax": ["CNN with 105,930 parameters"]}
    assert checks["layers"]["numbers"]["parameters"] == {"pytorch": 105930, "jax": 105930}
    assert checks["optimizer"]["passed"] and "JAX optax.sgd(lr=0.1, momentum=0.9" in checks["optimizer"]["evidence"]
    assert checks["flops"]["passed"] and checks["layers_without_parameters"]["passed"] and checks["modes"]["passed"]
    # the PyTorch side's weights, on its batch; the step's optax cross-entropy says the JAX model returns logits
    assert checks["outputs"]["evidence"] == "both return (8, 10) outputs, as their own losses take them"
    assert max(v["relative"] for v in checks["logits"]["numbers"].values() if v) < 1e-5
    assert checks["dropout"]["passed"]
    assert "first_parting_layer" not in checks


def test_the_planted_twin_fails_naming_the_layer_that_differs(certificates):
    cert = certificates["mnist_torch_planted"]
    checks = _checks(cert)
    assert cert["status"] == "fail" and checks["layers"]["passed"] and not checks["logits"]["passed"]
    parting = checks["first_parting_layer"]["evidence"]
    assert parting.startswith("first parts at PyTorch bn1 (BatchNorm2d) / JAX bn1 (BatchNorm): output differs "), \
        parting
    # (in evaluation mode the running variance of 1 hides most of it: on some batches only training mode parts)
    assert "; settings that differ: epsilon 0.001 vs 1e-05" in parting, parting
    assert cert["summary"].startswith("NOT the same model: logits:") and cert["summary"].endswith(parting)


def test_the_linen_example_and_the_same_twin_are_the_same_model(mnist, data_dir):
    tmp = mnist.parent / "linen"
    cert = certify_scripts(_pair("mnist_torch.py", data_dir, mnist, tmp / "state",
                                 str(CORPUS / "linen" / "train_linen.py")),
                           LocalRunner(ENVS, data_dir, "cpu"), tmp / "certificate")
    assert cert["status"] == "pass", cert["summary"]
    checks = _checks(cert)
    # the linen module its TrainState's apply_fn runs, with the params and batch_stats the step received
    assert cert["captured"] == {"pytorch": ["CNN with 105,930 parameters"],
                                "jax": ["CNN (flax.linen) with 105,930 parameters"]}
    assert checks["optimizer"]["passed"] and "JAX optax.sgd(lr=0.1, momentum=0.9" in checks["optimizer"]["evidence"]
    assert checks["flops"]["passed"] and checks["layers_without_parameters"]["passed"] and checks["modes"]["passed"]
    assert max(v["relative"] for v in checks["logits"]["numbers"].values() if v) < 1e-5
    assert checks["dropout"]["passed"]

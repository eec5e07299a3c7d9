"""The certificate on the models two users' scripts train, captured by the probe (reprokit/script_certificate.py).

Real scripts from tests/user_scripts/, real frameworks, the local runner: each script runs under the probe to
its first optimizer step, where its model is put into the certificate's canonical form from the object itself.
The same model written in two scripts passes; a setting changed after construction (a BatchNorm epsilon) is seen;
a script that trains two models or none is named and stops the certificate.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from reprokit import script_plan
from reprokit.envs import ENVS
from reprokit.experiments import from_scripts, load
from reprokit.plan import Options
from reprokit.provenance import code
from reprokit.runners.local import LocalRunner
from reprokit.script_certificate import certify_scripts

SCRIPTS = Path(__file__).parent / "user_scripts"
pytestmark = pytest.mark.slow


def _pair(exp, data_dir: Path) -> dict[str, dict]:
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("pytorch", "tensorflow"), data_dir=data_dir,
                   allow_download=False)
    specs = script_plan.specs_for(exp.name, exp.scripts, opts, lambda fw: {"lock": None, "lock_sha256": None,
                                                                           "image": None}, code())
    return {s["framework"]: s for s in specs}


def _checks(cert: dict) -> dict[str, dict]:
    return {c["name"]: c for c in cert["checks"]}


def test_a_batchnorm_epsilon_changed_after_construction_is_seen(kit_python, tmp_path, data_dir, monkeypatch):
    kit_python("pytorch"), kit_python("tensorflow")
    pair = _pair(load(SCRIPTS / "bn_pair.toml"), data_dir)
    runner = LocalRunner(ENVS, data_dir, "cpu")
    same = certify_scripts(pair, runner, tmp_path / "same")
    assert same["status"] == "pass", same["summary"]
    checks = _checks(same)
    # Keras counts BatchNorm's moving statistics as parameters, PyTorch keeps them as buffers; the canonical
    # layers hold both
    assert same["captured"] == {"pytorch": ["Sequential with 322 parameters"],
                                "tensorflow": ["Sequential with 338 parameters"]}
    assert checks["layers"]["numbers"]["parameters"] == {"pytorch": 338, "tensorflow": 338}
    assert checks["logits"]["numbers"]["fp32 train"]["relative"] < 1e-5
    assert "keras.optimizers.Adam" in checks["optimizer"]["evidence"] and checks["optimizer"]["passed"]
    assert checks["loss_trajectory"]["passed"] is None and "not checked for scripts" in checks["loss_trajectory"][
        "evidence"]
    # the same files, the epsilon set on the built model: the captured object shows it
    monkeypatch.setenv("REPROKIT_TEST_BN_EPS", "1e-3")
    changed = certify_scripts(pair, runner, tmp_path / "changed")
    checks = _checks(changed)
    assert changed["status"] == "fail" and checks["layers"]["passed"] and not checks["logits"]["passed"]
    assert checks["logits"]["numbers"]["fp32 train"]["relative"] > 1e-2
    assert changed["summary"].startswith("NOT the same model: logits:")


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

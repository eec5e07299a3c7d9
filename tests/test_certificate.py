"""The equivalence certificate: real kits on the CPU for the models, plain numpy for its parts.

Positive: the tiny SimpleCNN (BatchNorm, dropout) and the quick VGG16 at 48x48 (a 1x1 final
feature map) and 64x64 (2x2: the flatten permutation) pass. Negative controls: BatchNorm epsilon
1e-3 on the TensorFlow side only fails the logits and the loss trajectory, and PyTorch's
1000-class head fails the shape check on the last dense layer. The tolerances stay the defaults.
"""
from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kits.common import certificate as cert
from reprokit import certificate
from reprokit.cli import ENVS
from reprokit.errors import UserError
from reprokit.experiments import BUILTIN_DIR, load
from reprokit.plan import Options, run_id, specs_for
from reprokit.provenance import REPO
from reprokit.runners.local import LocalRunner

from conftest import tiny_specs, write_spec

FRAMEWORKS = ("pytorch", "tensorflow")


def _runner(kit_python, data_dir: Path) -> LocalRunner:
    """The local runner on the kits' real environments (built once per session by kit_python)."""
    for fw in FRAMEWORKS:
        kit_python(fw)
    return LocalRunner(ENVS, data_dir, "cpu")


def _vgg_specs(data_dir: Path, edit=None) -> dict[str, dict]:
    exp = load(BUILTIN_DIR / "vgg16_cifar10_speed.toml")
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=FRAMEWORKS, data_dir=data_dir,
                   allow_download=False)
    out = {}
    for spec in specs_for(exp, opts, lambda fw: {"lock": None, "lock_sha256": None, "image": None}, {}):
        if edit:
            edit(spec)
            spec["run_id"] = run_id(spec)
        out[spec["framework"]] = spec
    return out


def _check(result: dict, name: str) -> dict:
    return next(c for c in result["checks"] if c["name"] == name)


# -- tolerances and bad input: no framework needed ------------------------------------------------

def test_default_tolerances_are_declared_and_positive():
    tol = certificate.validate_tolerances(None)
    assert tol == {"logits_atol": 1e-4, "loss_rtol": 1e-6, "flops_rtol": 1e-6}
    assert certificate.validate_tolerances({"logits_atol": 1e-5})["logits_atol"] == 1e-5


@pytest.mark.parametrize("value", [0, -1e-4, "1e-4", True, float("nan"), float("inf"), None, [1e-4]])
def test_a_tolerance_that_is_not_a_positive_number_is_refused(value, tmp_path):
    with pytest.raises(UserError) as err:
        certificate.certify({}, LocalRunner(ENVS, tmp_path, "cpu"), tmp_path / "w", {"loss_rtol": value})
    message = str(err.value)
    assert message.startswith("certificate tolerance loss_rtol must be a positive number") and "\n" not in message
    assert not (tmp_path / "w").exists()          # refused before anything ran


def test_an_unknown_tolerance_is_refused_with_the_known_ones(tmp_path):
    with pytest.raises(UserError, match="'logit_atol' is unknown; the tolerances are logits_atol, loss_rtol, flops_rtol"):
        certificate.validate_tolerances({"logit_atol": 1e-4})


def test_specs_of_two_experiments_are_refused(tmp_path, tiny_dir, data_dir):
    specs = tiny_specs(tiny_dir, data_dir)
    specs["tensorflow"]["experiment"] = "other"
    with pytest.raises(UserError, match="different experiments"):
        certificate.certify(specs, LocalRunner(ENVS, data_dir, "cpu", python=Path("/bin/sh")), tmp_path)
    with pytest.raises(UserError, match="got specs for pytorch"):
        certificate.certify({"pytorch": specs["pytorch"]}, LocalRunner(ENVS, data_dir, "cpu"), tmp_path)


def _fake_python(tmp_path: Path, side: dict | None) -> Path:
    """An 'interpreter' that writes the given side file (or nothing) and exits 2."""
    script = tmp_path / "fake-python"
    body = "" if side is None else f"printf '%s' '{json.dumps(side)}' > \"$out\"\n"
    script.write_text("#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=\"$2\"; shift; done\n"
                      f"{body}echo 'some log line' >&2\nexit 2\n")
    script.chmod(0o755)
    return script


def test_a_model_without_canonical_form_gives_a_clear_message(tmp_path, tiny_dir, data_dir):
    side = {"schema": cert.SIDE_SCHEMA, "status": "unmappable",
            "message": "PyTorch layer 3 (LayerNorm) has weights but no canonical form (known: Conv2d, Linear, BatchNorm2d)"}
    fake = _fake_python(tmp_path, side)
    result = certificate.certify(tiny_specs(tiny_dir, data_dir), LocalRunner(ENVS, data_dir, "cpu", python=fake),
                                 tmp_path / "work")
    assert result["status"] == "error"
    assert result["message"] == f"the PyTorch side has no canonical form: {side['message']}"
    assert result["summary"].startswith("no certificate: the PyTorch side has no canonical form")
    assert json.loads((tmp_path / "work" / "certificate.json").read_text())["status"] == "error"


def test_a_side_that_writes_nothing_is_an_error_with_its_log(tmp_path, tiny_dir, data_dir):
    fake = _fake_python(tmp_path, None)
    result = certificate.certify(tiny_specs(tiny_dir, data_dir), LocalRunner(ENVS, data_dir, "cpu", python=fake),
                                 tmp_path / "work")
    assert result["status"] == "error"
    assert "exited with 2 and wrote no readable side.json" in result["message"] and "some log line" in result["message"]


# -- the framework-free parts ---------------------------------------------------------------------

def _records(dense1_in: int) -> list[dict]:
    return [cert.record("conv", 13, "kernel", (3, 3, 512, 512), "x", (512, 512, 3, 3)),
            cert.record("dense", 1, "kernel", (dense1_in, 4096), "x", (4096, dense1_in)),
            cert.record("dense", 1, "bias", (4096,), "x", (4096,))]


def test_a_shape_mismatch_names_the_layer_and_both_shapes():
    """torchvision's VGG16 at 32x32 feeds 25,088 features to its classifier, Keras's 512."""
    check = cert.compare_layers({"pytorch": _records(25088), "tensorflow": _records(512)})
    assert check["passed"] is False and check["mapped"] is False
    assert check["mismatches"] == ["dense 1 kernel: PyTorch (25088, 4096) vs TensorFlow (512, 4096)"]
    assert check["evidence"].startswith("not the same model: 1 parameter shape(s) differ")


def test_different_layer_lists_are_not_the_same_model():
    check = cert.compare_layers({"pytorch": _records(512), "tensorflow": _records(512)[:1]})
    assert check["passed"] is False and check["mapped"] is False
    assert "not the same model: the layer lists differ (PyTorch: 13 conv, 1 dense; TensorFlow: 13 conv)" in check["evidence"]
    assert "PyTorch has dense1.kernel, TensorFlow has nothing (its list ends)" in check["evidence"]


def test_a_weights_file_that_does_not_fit_is_refused_in_one_sentence(tmp_path):
    records = _records(512)
    good = {r["name"]: np.zeros(r["shape"], np.float32) for r in records}
    path = tmp_path / "w.npz"
    cert.save_weights(path, good)
    assert set(cert.load_weights(path, records)) == set(good)
    cert.save_weights(path, {**good, "dense1.kernel": np.zeros((25088, 4096), np.float32)})
    with pytest.raises(cert.WeightsMismatch, match=r"dense1.kernel is \(25088, 4096\), the model's is \(512, 4096\)"):
        cert.load_weights(path, records)
    del good["dense1.bias"]
    cert.save_weights(path, {**good, "dense9.bias": np.zeros(3, np.float32)})
    with pytest.raises(cert.WeightsMismatch, match="it lacks dense1.bias; it has dense9.bias which the model does not"):
        cert.load_weights(path, records)
    path.write_text("not a zip")
    with pytest.raises(cert.WeightsMismatch, match="is not a readable .npz"):
        cert.load_weights(path, records)
    with pytest.raises(cert.WeightsMismatch, match="does not exist"):
        cert.load_weights(tmp_path / "missing.npz", records)


def test_fp64_preprocessing_is_half_pixel_bilinear_without_antialias():
    x = np.arange(4, dtype=np.uint8).reshape(1, 1, 4, 1).repeat(4, axis=1).repeat(3, axis=3)
    out = cert.preprocess64(x, 1.0, 8)
    # half-pixel centres: output column j samples input position (j + 0.5) / 2 - 0.5, clamped at the edges
    assert out.shape == (1, 8, 8, 3)
    assert np.allclose(out[0, 0, :, 0], [0, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3])
    assert np.array_equal(cert.preprocess64(x, 1 / 255, None), x / 255)


def test_the_torch_hyperparameters_that_reproduce_keras():
    adam = {"name": "adam", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7}
    p = cert.torch_hyperparameters_like_keras(adam, 1)
    assert p["eps"] == pytest.approx(1e-7 / math.sqrt(1 - 0.999))      # Keras's eps, in torch's formula
    assert p["lr"] / 1e-3 == pytest.approx(1 - 6.675e-6, abs=1e-8)       # float32-rounded betas in Keras
    sgd = {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": False}
    assert cert.torch_hyperparameters_like_keras(sgd, 5) == {"lr": 0.1, "momentum": float(np.float32(0.9))}


# -- the real kits --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(kit_python, tmp_path_factory, data_dir):
    from conftest import TINY
    folder = tmp_path_factory.mktemp("exp")
    (folder / "tiny.toml").write_text(TINY)
    return folder


@pytest.mark.slow
def test_the_tiny_simplecnn_is_certified(kit_python, tiny, data_dir, tmp_path):
    result = certificate.certify(tiny_specs(tiny, data_dir), _runner(kit_python, data_dir), tmp_path)
    assert result["status"] == "pass", result["summary"]
    assert json.loads((tmp_path / "certificate.json").read_text())["status"] == "pass"
    layers = _check(result, "layers")
    assert layers["numbers"]["parameters"] == {"pytorch": 121_778, "tensorflow": 121_778}
    assert layers["numbers"]["tensors"]["pytorch"] == 10 * 2 + 10 * 4 + 2
    flops = _check(result, "flops")["numbers"]
    assert flops["per_sample"]["pytorch"] == flops["per_sample"]["tensorflow"] > 0
    logits = _check(result, "logits")["numbers"]
    assert logits["fp32 eval"]["max_abs_diff"] < 1e-5 and logits["fp64 train"]["max_abs_diff"] < 1e-10
    loss = _check(result, "loss_trajectory")["numbers"]
    assert len(loss["pytorch"]) == cert.STEPS + 1 and loss["max_relative_difference"] < 1e-9
    assert result["setup"]["step_batch_size"] == 32 and result["setup"]["steps"] == 10   # 8 batches of epoch 1, 2 of epoch 2
    fields = [d["field"] for d in result["declared_differences"]]
    assert {"SGD momentum form", "BatchNorm momentum convention", "BatchNorm running variance",
            "initializers", "padding rules", "dropout masks"} <= set(fields)
    assert all(d["handled"] for d in result["declared_differences"])
    assert result["spec_differences"] == []
    assert "declared running-variance difference" in _check(result, "weights_after_steps")["evidence"]


@pytest.mark.slow
def test_batchnorm_epsilon_on_one_side_fails_with_the_numbers(kit_python, tiny, data_dir, tmp_path):
    # A copy first: the planned specs of one experiment share their nested sections.
    specs = json.loads(json.dumps(tiny_specs(tiny, data_dir)))
    specs["tensorflow"]["model"]["batchnorm"]["epsilon"] = 1e-3
    result = certificate.certify(specs, _runner(kit_python, data_dir), tmp_path)
    assert result["status"] == "fail"
    assert result["tolerances"]["logits_atol"]["value"] == 1e-4 and result["tolerances"]["loss_rtol"]["value"] == 1e-6
    assert _check(result, "layers")["passed"] and _check(result, "flops")["passed"]   # same shapes, same work
    logits = _check(result, "logits")
    assert logits["passed"] is False and logits["numbers"]["fp32 eval"]["max_abs_diff"] > 1e-3
    assert "fp32 eval mode max |diff|" in logits["evidence"] and "> 0.0001" in logits["evidence"]
    loss = _check(result, "loss_trajectory")
    assert loss["passed"] is False and loss["numbers"]["max_relative_difference"] > 1e-2
    assert result["spec_differences"] == ["model.batchnorm.epsilon: PyTorch 1e-05, TensorFlow 0.001"]
    assert result["summary"].startswith("NOT equivalent: logits:")


@pytest.mark.slow
@pytest.mark.parametrize("input_size", [48, 64])
def test_the_quick_vgg16_is_certified(kit_python, data_dir, tmp_path, input_size):
    """48: a 1x1 final feature map; 64: 2x2, so the first dense layer's rows are permuted from CHW to HWC."""
    def size(spec):
        spec["data"]["input_size"] = input_size
    result = certificate.certify(_vgg_specs(data_dir, size), _runner(kit_python, data_dir), tmp_path)
    assert result["status"] == "pass", result["summary"]
    pt = json.loads((tmp_path / "pytorch" / certificate.SIDE_NAME).read_text())
    dense1 = next(r for r in pt["layers"] if r["name"] == "dense1.kernel")
    channels = 64                                    # 512 at width 0.125
    spatial = input_size // 32
    assert dense1["shape"] == [spatial * spatial * channels, 256]
    assert dense1["native"]["shape"] == [256, channels * spatial * spatial]
    assert _check(result, "logits")["numbers"]["fp32 eval"]["max_abs_diff"] < 1e-4
    assert _check(result, "loss_trajectory")["numbers"]["max_relative_difference"] < 1e-12
    adam = next(d for d in result["declared_differences"] if d["field"] == "Adam epsilon placement")
    assert adam["source"] == "spec" and "removed from the certified fp64 trajectory" in adam["handled"]
    assert all(d.get("handled") for d in result["declared_differences"])
    assert [n["field"] for n in result["neutralised"]] == ["Adam epsilon placement", "Keras float64 hyper-parameter rounding"]
    # as the kits train (fp32, epsilon placement in effect) the trajectories part measurably
    assert _check(result, "loss_trajectory_fp32")["numbers"]["max_relative_difference"] > 1e-5


@pytest.mark.slow
def test_pytorchs_1000_class_head_is_not_the_same_model(kit_python, data_dir, tmp_path):
    specs = _vgg_specs(data_dir)
    specs["pytorch"]["pitfalls"] = ["pt_head_1000"]
    result = certificate.certify(specs, _runner(kit_python, data_dir), tmp_path)
    assert result["status"] == "fail"
    layers = _check(result, "layers")
    assert layers["mismatches"] == ["dense 3 kernel: PyTorch (256, 1000) vs TensorFlow (256, 10)",
                                    "dense 3 bias: PyTorch (1000,) vs TensorFlow (10,)"]
    assert layers["evidence"].startswith("not the same model")
    flops = _check(result, "flops")
    assert flops["passed"] is False and flops["numbers"]["ratio"] > 1.02
    for name in ("logits", "loss_trajectory"):
        assert _check(result, name)["passed"] is None and "cannot be loaded into both" in _check(result, name)["skipped"]
    assert result["summary"] == ("NOT equivalent: dense 3 kernel: PyTorch (256, 1000) vs TensorFlow (256, 10); "
                                 f"flops: {flops['evidence']}")
    assert result["spec_differences"] == ["pitfalls: PyTorch ['pt_head_1000'], TensorFlow []"]


@pytest.mark.slow
def test_the_kit_refuses_weights_of_another_model(kit_python, tiny, data_dir, tmp_path):
    other = tmp_path / "other.npz"
    cert.save_weights(other, {"dense1.kernel": np.zeros((512, 4096), np.float32)})
    spec = tiny_specs(tiny, data_dir)["tensorflow"]
    mismatch = ("does not match the model (62 canonical parameters): it lacks conv1.kernel, conv1.bias, "
                "batchnorm1.gamma and 58 more; dense1.kernel is (512, 4096), the model's is (64, 10)")
    for weights, expected in ((other, mismatch),
                              (tmp_path / "nothing.npz", "does not exist")):
        out = tmp_path / "side.json"
        proc = subprocess.run([str(kit_python("tensorflow")), "-m", "kits.certify", "--spec",
                               str(write_spec(tmp_path, spec)), "--data-dir", str(data_dir), "--out", str(out),
                               "--weights-in", str(weights)],
                              cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 2
        assert expected in proc.stderr.strip().splitlines()[-1] and "Traceback" not in proc.stderr
        side = json.loads(out.read_text())
        assert side["status"] == "refused" and expected in side["message"] and side["layers"]

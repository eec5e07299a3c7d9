"""The equivalence certificate: real kits on the CPU for the models, plain numpy for its parts.

Positive: the tiny SimpleCNN (BatchNorm, dropout) and the quick VGG16 (Adam, dropout) pass. Negative controls: BatchNorm epsilon 1e-3 on the
TensorFlow side only fails the logits and the loss trajectories, and PyTorch's 1000-class head
fails the shape check on the last dense layer. The tolerances stay the defaults. The real-kit
certificates are made once for the whole suite (tests/certified.py); the control pairs of a
user's own models are in tests/test_certificate_controls.py.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from checkout import REPO
from conftest import tiny_specs, write_spec

from reprokit.certify import certificate
from reprokit.environments.envs import ENVS
from reprokit.errors import UserError
from reprokit.kits.framework_free import arithmetic, model_checks, numeric_checks, stochastic
from reprokit.kits.framework_free import certificate as cert
from reprokit.runners.local import LocalRunner

FRAMEWORKS = ("pytorch", "tensorflow")


def _check(result: dict, name: str) -> dict:
    return next(c for c in result["checks"] if c["name"] == name)


# -- tolerances and bad input: no framework needed ------------------------------------------------

def test_default_tolerances_are_declared_and_positive():
    tol = certificate.validate_tolerances(None)
    assert tol == {"logits_rtol": 1e-4, "loss_rtol": 1e-6, "trajectory_factor": 10.0, "layer_rtol": 1e-7}
    assert certificate.validate_tolerances({"logits_rtol": 1e-5})["logits_rtol"] == 1e-5


@pytest.mark.parametrize("value", [0, -1e-4, "1e-4", True, float("nan"), float("inf"), None, [1e-4]])
def test_a_tolerance_that_is_not_a_positive_number_is_refused(value, tmp_path):
    with pytest.raises(UserError) as err:
        certificate.certify_many([{}], LocalRunner(ENVS, tmp_path, "cpu"), [tmp_path / "w"], {"loss_rtol": value})
    message = str(err.value)
    assert message.startswith("certificate tolerance loss_rtol must be a positive number") and "\n" not in message
    assert not (tmp_path / "w").exists()          # refused before anything ran


def test_an_unknown_tolerance_is_refused_with_the_known_ones(tmp_path):
    with pytest.raises(UserError, match="'logits_atol' is unknown; the tolerances are logits_rtol, loss_rtol, "
                                        "trajectory_factor"):
        certificate.validate_tolerances({"logits_atol": 1e-4})


def test_specs_of_two_experiments_are_refused(tmp_path, tiny_dir, data_dir):
    specs = tiny_specs(tiny_dir, data_dir)
    specs["tensorflow"]["experiment"] = "other"
    with pytest.raises(UserError, match="different experiments"):
        certificate.certify_many([specs], LocalRunner(ENVS, data_dir, "cpu", python=Path("/bin/sh")), [tmp_path])
    with pytest.raises(UserError, match="got specs for pytorch"):
        certificate.certify_many([{"pytorch": specs["pytorch"]}], LocalRunner(ENVS, data_dir, "cpu"), [tmp_path])


def _fake_python(tmp_path: Path, side: dict | None) -> Path:
    """An 'interpreter' that writes the given side file (or nothing) for every job and exits 2."""
    script = tmp_path / "fake-python"
    write = ("" if side is None else
             f"    (out / job['name']).mkdir()\n    (out / job['name'] / 'side.json').write_text({json.dumps(json.dumps(side))})\n")
    script.write_text(f"#!{sys.executable}\nimport json, sys\nfrom pathlib import Path\n"
                      "out = Path(sys.argv[sys.argv.index('--out-dir') + 1])\n"
                      "for job in json.loads(Path(sys.argv[sys.argv.index('--jobs') + 1]).read_text()):\n"
                      f"{write}    pass\nprint('some log line', file=sys.stderr)\nsys.exit(2)\n")
    script.chmod(0o755)
    return script


def test_a_model_without_canonical_form_gives_a_clear_message(tmp_path, tiny_dir, data_dir):
    side = {"schema": cert.SIDE_SCHEMA, "status": "unmappable",
            "message": "PyTorch layer 3 (LayerNorm) has weights but no canonical form (known: Conv2d, Linear, BatchNorm2d)"}
    fake = _fake_python(tmp_path, side)
    [result] = certificate.certify_many([tiny_specs(tiny_dir, data_dir)],
                                        LocalRunner(ENVS, data_dir, "cpu", python=fake), [tmp_path / "work"])
    assert result["status"] == "error"
    assert result["message"] == f"the PyTorch side has no canonical form: {side['message']}"
    assert result["summary"].startswith("no certificate: the PyTorch side has no canonical form")
    assert json.loads((tmp_path / "work" / "certificate.json").read_text())["status"] == "error"


def test_a_side_that_writes_nothing_is_an_error_with_its_log(tmp_path, tiny_dir, data_dir):
    fake = _fake_python(tmp_path, None)
    [result] = certificate.certify_many([tiny_specs(tiny_dir, data_dir)],
                                        LocalRunner(ENVS, data_dir, "cpu", python=fake), [tmp_path / "work"])
    assert result["status"] == "error"
    assert "exited with 2 and wrote no readable side.json" in result["message"] and "some log line" in result["message"]


# -- the framework-free parts ---------------------------------------------------------------------

def _records(dense1_in: int) -> list[dict]:
    return [cert.record("conv", 13, "kernel", (3, 3, 512, 512), "28.weight", (512, 512, 3, 3)),
            cert.record("dense", 1, "kernel", (dense1_in, 4096), "32.weight", (4096, dense1_in)),
            cert.record("dense", 1, "bias", (4096,), "32.bias", (4096,))]


def test_a_shape_mismatch_names_the_layer_and_both_shapes():
    """torchvision's VGG16 at 32x32 feeds 25,088 features to its classifier, Keras's 512."""
    check = model_checks.compare_layers({"pytorch": _records(25088), "tensorflow": _records(512)})
    assert check["passed"] is False and check["mapped"] is False
    assert check["mismatches"] == ["dense 1 kernel: PyTorch (25088, 4096) vs TensorFlow (512, 4096) (32.weight, 32.weight)"]
    assert check["evidence"].startswith("not the same model: 1 parameter shape(s) differ")


def test_different_layer_lists_are_not_the_same_model():
    check = model_checks.compare_layers({"pytorch": _records(512), "tensorflow": _records(512)[:1]})
    assert check["passed"] is False and check["mapped"] is False
    assert "not the same model: the layer lists differ (PyTorch: 13 conv, 1 dense; TensorFlow: 13 conv)" in check["evidence"]
    assert "PyTorch has dense1.kernel (32.weight), TensorFlow has nothing (its list ends)" in check["evidence"]


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


def _conv(cin, cout, out, grads=("input", "weight"), padding=(1, 1), stride=1):
    start = [padding[0], padding[0]]
    size_in = [out * stride] * 2
    return arithmetic.conv([3, 3], cin, cout, 1, [stride] * 2, [1, 1], size_in, [out, out], start, 2, list(grads))


def test_training_flops_follow_the_rule():
    """Forward: 2 FLOPs per multiply-accumulate; backward: one product per operand that needs a gradient."""
    ops = [_conv(3, 8, 16, grads=("weight",)), arithmetic.activation("relu"), _conv(8, 8, 16),
           arithmetic.matmul(2, 2048, 10, 2, ["input", "weight"])]
    macs = [16 * 16 * 9 * 3 * 8, 16 * 16 * 9 * 8 * 8, 2048 * 10]
    assert arithmetic.flops(ops) == {"forward": 2 * sum(macs), "backward": 2 * (macs[0] + 2 * macs[1] + 2 * macs[2]),
                                     "training": 2 * sum(macs) + 2 * (macs[0] + 2 * macs[1] + 2 * macs[2]),
                                     # the same rule, by kind of op (each may run in its own precision)
                                     "training_by_op": {"convolution": 2 * (2 * macs[0] + 3 * macs[1]),
                                                        "matmul": 2 * 3 * macs[2]},
                                     "convolutions": 2, "matrix_products": 1}


def test_the_first_product_that_differs_is_named():
    a = [_conv(3, 8, 16, grads=("weight",)), _conv(8, 8, 16)]
    assert arithmetic.first_arithmetic_difference(a, list(a), "PyTorch", "TensorFlow") is None
    b = [_conv(3, 8, 16, grads=("weight",)), _conv(8, 8, 8, stride=2)]
    assert arithmetic.first_arithmetic_difference(a, b, "PyTorch", "TensorFlow") == (
        "product 2 of 2: PyTorch conv 3x3, 8->8 channels, stride 1, output 16x16, "
        "TensorFlow conv 3x3, 8->8 channels, stride 2, output 8x8")
    c = [_conv(3, 8, 16), _conv(8, 8, 16)]          # the image asks for a gradient in one of them
    assert "PyTorch conv 3x3, 3->8 channels, stride 1, output 16x16 with weight gradient only, TensorFlow with " \
           "input and weight gradients" in arithmetic.first_arithmetic_difference(a, c, "PyTorch", "TensorFlow")


def test_padding_is_compared_as_applied():
    """padding=1 on a stride-2 conv (PyTorch) and padding='same' (TensorFlow) on an even input: both give
    8x8 from 16x16, but pad the top-left and the bottom-right respectively."""
    torch_like = arithmetic.window_padding(16, 8, 3, 2, 1, 1)
    keras_like = arithmetic.window_padding(16, 8, 3, 2, 1, arithmetic.same_padding_start(16, 3, 2, 1))
    assert (torch_like, keras_like) == ([1, 0], [0, 1])
    assert arithmetic.window_padding(16, 16, 3, 1, 1, arithmetic.same_padding_start(16, 3, 1, 1)) == [1, 1]


def test_elementwise_runs_commute_but_places_do_not():
    relu, drop = arithmetic.activation("relu"), arithmetic.dropout(0.3, (2, 8), (2, 8), ["N", "F"])
    pool = arithmetic.pool("max", [2, 2], [2, 2], [16, 16], [8, 8], [0, 0])
    first = [_conv(3, 8, 16), relu, drop, pool]
    assert arithmetic.first_structure_difference(first, [_conv(3, 8, 16), drop, relu, pool], "A", "B") is None
    moved = [_conv(3, 8, 16), relu, pool, drop]
    assert arithmetic.first_structure_difference(first, moved, "A", "B") == (
        "after product 1: A has padding (1, 1, 1, 1) (top, bottom, left, right); dropout rate 0.3, per element; relu; "
        "max pool 2x2, stride 2x2, output 8x8, padding (0, 0, 0, 0), B has padding (1, 1, 1, 1) (top, bottom, left, "
        "right); relu; max pool 2x2, stride 2x2, output 8x8, padding (0, 0, 0, 0); dropout rate 0.3, per element")


def test_a_dense_layers_rows_follow_the_flatten():
    """PyTorch flattens NCHW as (c, h, w); a permute to NHWC first gives Keras's (h, w, c), the canonical order."""
    c, h, w = 3, 2, 2
    chw = arithmetic.canonical_rows([1, c, h, w], [("reshape", [1, c * h * w])], "channels_first")
    assert chw == [(hi * w + wi) * c + ci for ci in range(c) for hi in range(h) for wi in range(w)]
    hwc = arithmetic.canonical_rows([1, c, h, w], [("transpose", [0, 2, 3, 1]), ("reshape", [1, 12])], "channels_first")
    assert hwc == list(range(12))
    keras = arithmetic.canonical_rows([1, h, w, c], [("reshape", [1, 12])], "channels_last")
    assert keras == list(range(12))
    kernel = np.arange(24.0).reshape(12, 2)
    assert np.array_equal(arithmetic.rows_from_canonical(arithmetic.rows_to_canonical(kernel, chw), chw), kernel)
    assert arithmetic.canonical_rows([1, c, h, w], [("reshape", [1, 3, 4])], "channels_first") is None


def _draws(rng, n, rate, kind="element"):
    """Training-mode outputs of a dense layer behind dropout, one row per pass."""
    h = np.linspace(-1, 1, 4 * 32).reshape(4, 32)
    w = np.cos(np.arange(32 * 10)).reshape(32, 10)
    shape = (n, 4, 32) if kind == "element" else (n, 4, 1)
    mask = (rng.random(shape) >= rate) / (1 - rate)
    return np.einsum("kij,jc->kic", mask * h, w)


def test_the_dropout_tests_false_alarm_rate_is_its_alpha():
    """200 pairs of draws from one distribution, at alpha 0.1: about 20 false alarms (binomial sd 4.2)."""
    rng = np.random.default_rng(7)
    alarms = sum(stochastic.energy_test(_draws(rng, 32, 0.3), _draws(rng, 32, 0.3), 99, seed)["p_value"] <= 0.1
                 for seed in range(200))
    assert 8 <= alarms <= 34


def test_the_dropout_check_tells_rates_and_kinds_apart():
    rng = np.random.default_rng(0)
    n = cert.DROPOUT_PASSES
    same = numeric_checks.compare_dropout({"pytorch": _draws(rng, n, 0.1), "tensorflow": _draws(rng, n, 0.1)})
    assert same["passed"] and same["numbers"]["p_value"] > stochastic.ALPHA
    rate = numeric_checks.compare_dropout({"pytorch": _draws(rng, n, 0.1), "tensorflow": _draws(rng, n, 0.2)})
    assert rate["passed"] is False and rate["numbers"]["p_value"] <= stochastic.ALPHA
    kind = numeric_checks.compare_dropout({"pytorch": _draws(rng, n, 0.3), "tensorflow": _draws(rng, n, 0.3, "row")})
    assert kind["passed"] is False
    fixed = np.repeat(_draws(rng, 1, 0.0), n, axis=0)
    one = numeric_checks.compare_dropout({"pytorch": _draws(rng, n, 0.1), "tensorflow": fixed})
    assert one["passed"] is False and "active in PyTorch only" in one["evidence"]
    assert numeric_checks.compare_dropout({"pytorch": fixed, "tensorflow": fixed})["passed"]


def test_the_fp32_gate_holds_the_divergence_to_ten_times_the_baseline():
    def side(kit, rounding=0.0):
        return {"kit": kit, "perturbed": [x * (1 + 3e-7) for x in kit], "exact": kit,
                "reference": [x * (1 + rounding) for x in kit]}
    kit = [2.5, 2.4, 2.3, 2.2]
    ok = numeric_checks.compare_fp32_trajectory({"pytorch": side(kit), "tensorflow": side([x * (1 + 2e-6) for x in kit])}, 10)
    assert ok["passed"] and ok["numbers"]["bound"][0] == pytest.approx(3e-6, rel=1e-3)
    apart = [*kit[:2], 2.31, 2.2]
    off = numeric_checks.compare_fp32_trajectory({"pytorch": side(kit), "tensorflow": side(apart)}, 10)
    assert off["passed"] is False and "worst at step 3" in off["evidence"]
    # the framework's own fp32 rounding against fp64 counts as baseline too
    assert numeric_checks.compare_fp32_trajectory({"pytorch": side(kit), "tensorflow": side(apart, 1e-3)}, 10)["passed"]


def test_a_chaotic_fp64_trajectory_is_judged_up_to_where_rounding_alone_parts_it():
    """ResNet-50's trajectory: rounding grows by orders of magnitude per step in one framework too. The steps
    before the horizon (every ulp-apart draw still within a tenth of loss_rtol) are held to it, the rest shown."""
    def apart(values, rel):
        return [v * (1 + r) for v, r in zip(values, rel)]
    pt = [8.4, 9.7, 9.2, 9.0, 9.7, 9.2, 8.3, 8.6, 7.9, 9.7, 8.6]
    rounding = [1e-15, 4e-13, 3e-11, 9e-10, 2e-8, 5e-9, 2e-7, 4e-6, 7e-4, 3e-2, 2e-2]     # measured, PyTorch

    def baseline(tf, grows=rounding):      # each framework's own trajectory, from weights one ulp apart
        return {"pytorch": [apart(pt, grows), pt], "tensorflow": [apart(tf, grows[:7] + [0] * 4), tf]}
    chaotic = apart(pt, [6e-15, 1e-12, 5e-11, 3e-10, 5e-9, 4e-9, 8e-8, 3e-6, 1e-2, 4e-2, 2e-2])
    judged = numeric_checks.compare_losses({"pytorch": pt, "tensorflow": chaotic}, 1e-6, "fp64", 10, baseline=baseline(chaotic))
    assert judged["passed"] and judged["numbers"]["judged_points"] == 6
    assert ("judged up to step 6: from step 7 on, rounding alone parts a framework from itself by more than 0.1 of "
            "the tolerance") in judged["evidence"]
    # a real difference shows before the horizon and fails, whatever rounding does later
    real = apart(pt, [6e-15, 2e-4, 5e-11, 3e-10, 5e-9, 4e-9, 8e-8, 3e-6, 1e-2, 4e-2, 2e-2])
    failed = numeric_checks.compare_losses({"pytorch": pt, "tensorflow": real}, 1e-6, "fp64", 10, baseline=baseline(real))
    assert failed["passed"] is False and "at step 2" in failed["evidence"]
    # without chaos (rounding stays small) every point is judged, as for the seeds' models
    calm = baseline(chaotic, [1e-15] * 11)
    whole = numeric_checks.compare_losses({"pytorch": pt, "tensorflow": chaotic}, 1e-6, "fp64", 10, baseline=calm)
    assert whole["passed"] is False and whole["numbers"]["judged_points"] == 11


def test_the_optimizer_is_read_back_against_both_specs():
    sgd = {"name": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": False}
    built = {"class": "torch.optim.SGD", "name": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": False,
             "dampening": 0.0, "weight_decay": 0.0}
    keras = {**built, "class": "keras.optimizers.SGD", "lr": 0.05000000074505806, "weight_decay": None}
    assert model_checks.compare_optimizer({"pytorch": built, "tensorflow": keras}, {"pytorch": sgd, "tensorflow": sgd})["passed"]
    ignored = model_checks.compare_optimizer({"pytorch": {**built, "momentum": 0.0}, "tensorflow": keras},
                                     {"pytorch": sgd, "tensorflow": sgd})
    assert ignored["passed"] is False and "PyTorch's optimizer has momentum 0.0, its spec 0.9" in ignored["evidence"]
    apart = model_checks.compare_optimizer({"pytorch": built, "tensorflow": {**keras, "momentum": 0.95}},
                                   {"pytorch": sgd, "tensorflow": {**sgd, "momentum": 0.95}})
    assert apart["passed"] is False and "momentum is 0.9 in PyTorch and 0.95 in TensorFlow" in apart["evidence"]


# -- the real kits (made once for the suite: tests/certified.py) -----------------------------------

@pytest.mark.slow
def test_the_tiny_simplecnn_is_certified(certified):
    result = certified[0]["tiny"]
    assert result["status"] == "pass", result["summary"]
    assert json.loads((certified[1]["tiny"] / "certificate.json").read_text())["status"] == "pass"
    layers = _check(result, "layers")
    assert layers["numbers"]["parameters"] == {"pytorch": 121_778, "tensorflow": 121_778}
    assert layers["numbers"]["tensors"]["pytorch"] == 10 * 2 + 10 * 4 + 2
    flops = _check(result, "flops")["numbers"]
    assert flops["per_sample"]["pytorch"] == flops["per_sample"]["tensorflow"] > 0
    assert _check(result, "layers_without_parameters")["passed"]
    logits = _check(result, "logits")["numbers"]
    assert logits["fp32 eval"]["relative"] < 1e-5 and logits["fp64 train"]["relative"] < 1e-10
    assert _check(result, "dropout")["numbers"]["p_value"] > stochastic.ALPHA     # dropout 0.1, element, both
    loss = _check(result, "loss_trajectory")["numbers"]
    assert len(loss["pytorch"]) == cert.STEPS + 1 and loss["max_relative_difference"] < 1e-9
    assert _check(result, "loss_trajectory_fp32")["passed"]
    assert result["setup"]["step_batch_size"] == 32 and result["setup"]["steps"] == 10   # 8 batches of epoch 1, 2 of epoch 2
    fields = [d["field"] for d in result["declared_differences"]]
    assert {"SGD momentum form", "BatchNorm momentum convention", "BatchNorm running variance",
            "initializers", "padding rules", "dropout masks"} <= set(fields)
    assert all(d["handled"] for d in result["declared_differences"])
    assert result["spec_differences"] == []
    assert "declared running-variance difference" in _check(result, "weights_after_steps")["evidence"]


@pytest.mark.slow
def test_batchnorm_epsilon_on_one_side_fails_with_the_numbers(certified):
    result = certified[0]["tiny_batchnorm_epsilon"]
    assert result["status"] == "fail"
    assert result["tolerances"]["logits_rtol"]["value"] == 1e-4 and result["tolerances"]["loss_rtol"]["value"] == 1e-6
    assert _check(result, "layers")["passed"] and _check(result, "flops")["passed"]   # same shapes, same work
    logits = _check(result, "logits")
    assert logits["passed"] is False and logits["numbers"]["fp32 eval"]["relative"] > 1e-3
    assert "fp32 eval mode max |diff|" in logits["evidence"] and "> 0.0001" in logits["evidence"]
    loss = _check(result, "loss_trajectory")
    assert loss["passed"] is False and loss["numbers"]["max_relative_difference"] > 1e-2
    assert _check(result, "loss_trajectory_fp32")["passed"] is False
    assert result["spec_differences"] == ["model.batchnorm.epsilon: PyTorch 1e-05, TensorFlow 0.001"]
    # read from both built models, before any number: the first BatchNorm's epsilon, then the logits' evidence
    assert result["summary"].startswith("NOT equivalent: normalisation_settings: normalisation layer 1 of 10, "
                                        "PyTorch 3 (BatchNorm2d) / TensorFlow batch_normalization (BatchNormalization): "
                                        "epsilon 1e-05 vs 0.001; logits:")


@pytest.mark.slow
def test_the_quick_vgg16_is_certified(certified):
    """As reproduce certifies it on the CPU: 48x48, width 0.125 (the flatten orders of a larger final
    feature map are in tests/test_certificate_controls.py)."""
    result = certified[0]["vgg"]
    assert result["status"] == "pass", result["summary"]
    pt = certified[3]["vgg"]["pytorch"]
    dense1 = next(r for r in pt["layers"] if r["name"] == "dense1.kernel")
    channels = 64                                    # 512 at width 0.125; a 1x1 final feature map
    assert dense1["shape"] == [channels, 256] and dense1["native"]["shape"] == [256, channels]
    assert _check(result, "logits")["numbers"]["fp32 eval"]["relative"] < 1e-4
    assert _check(result, "loss_trajectory")["numbers"]["max_relative_difference"] < 1e-12
    adam = next(d for d in result["declared_differences"] if d["field"] == "Adam epsilon placement")
    assert adam["source"] == "spec" and "removed from both certified trajectories" in adam["handled"]
    assert all(d.get("handled") for d in result["declared_differences"])
    assert [n["field"] for n in result["neutralised"]] == ["Adam epsilon placement", "Keras float64 hyper-parameter rounding"]
    # as the kits train in fp32, the epsilon placement removed: within ten times the same-framework baseline
    assert _check(result, "loss_trajectory_fp32")["passed"]


def test_the_quick_resnet50_is_certified(certified):
    """As reproduce certifies it on the CPU (width 0.125, 32x32): 16 residual adds and 53 BatchNorms in both, the
    torchvision conventions (epsilon 1e-5, momentum 0.1) read from both built models; its chaotic fp64 trajectory
    judged up to where rounding alone parts it."""
    result = certified[0]["resnet"]
    assert result["status"] == "pass", result["summary"]
    ops = certified[3]["resnet"]["pytorch"]["ops"]
    assert sum(op["op"] == "add" for op in ops) == 16 == sum(op["op"] == "add" for op in certified[3]["resnet"]
                                                             ["tensorflow"]["ops"])
    norms = _check(result, "normalisation_settings")
    assert norms["passed"] and norms["evidence"] == ("the same settings in all 53 normalisation layers (epsilon 1e-05; "
                                                     "momentum 0.1 in the first)")
    trajectory = _check(result, "loss_trajectory")["numbers"]
    assert set(trajectory["rounding_baseline"]) == {"pytorch", "tensorflow"}
    assert all(len(draws) == cert.ULP_BASELINES for draws in trajectory["rounding_baseline"].values())
    assert 2 <= trajectory["judged_points"] <= 11 and trajectory["max_relative_difference"] <= 1e-6


def test_keras_applications_resnet50_is_another_model_and_the_certificate_names_how(certified):
    """The stock variant's pair: torchvision's ResNet-50 against keras.applications': its biases, its v1 strides
    (other arithmetic) and its BatchNorm conventions, each a failing check."""
    result = certified[0]["resnet_stock"]
    assert result["status"] == "fail"
    failed = {c["name"] for c in result["checks"] if c["passed"] is False}
    assert {"layers", "flops", "normalisation_settings"} <= failed, result["summary"]
    assert "cannot take the weights" in result["message"] and "bias" in result["message"]
    norms = _check(result, "normalisation_settings")["evidence"]
    assert norms.endswith("epsilon 1e-05 vs 1.001e-05; momentum 0.1 vs 0.01"), norms
    assert _check(result, "flops")["numbers"]["per_sample"]["tensorflow"] < \
        _check(result, "flops")["numbers"]["per_sample"]["pytorch"]          # v1 strides before the 3x3 work


@pytest.mark.slow
def test_a_model_over_the_budget_certifies_its_costly_checks_at_a_declared_reduced_width(certified):
    """The 64x64 quick VGG16 over the tests' budget: structure and fp32 logits at the timed size,
    dropout and trajectories at a narrower width, each of those checks saying so."""
    result = certified[0]["vgg_64_reduced"]
    assert result["status"] == "pass", result["summary"]
    reduced = result["reduced"]
    assert reduced["width_multiplier"] < 0.125 and "over the 1.5e+11 budget on a cpu" in reduced["reason"]
    pt = certified[3]["vgg_64_reduced"]["pytorch"]
    assert next(r for r in pt["layers"] if r["name"] == "dense1.kernel")["shape"] == [64 * 4, 256]   # timed size
    assert "losses" not in pt                                   # the timed size ran the structure only
    for name in ("dropout", "loss_trajectory", "loss_trajectory_fp32"):
        check = _check(result, name)
        assert check["width_multiplier"] == reduced["width_multiplier"]
        assert check["evidence"].startswith(f"at width {reduced['width_multiplier']:g} (reduced): ")
    assert _check(result, "logits").get("width_multiplier") is None and _check(result, "logits")["passed"]


@pytest.mark.slow
def test_pytorchs_1000_class_head_is_not_the_same_model(certified):
    result = certified[0]["vgg_head_1000"]
    assert result["status"] == "fail"
    layers = _check(result, "layers")
    assert layers["mismatches"] == ["dense 3 kernel: PyTorch (256, 1000) vs TensorFlow (256, 10) (38.weight, dense_2/kernel)",
                                    "dense 3 bias: PyTorch (1000,) vs TensorFlow (10,) (38.bias, dense_2/bias)"]
    assert layers["evidence"].startswith("not the same model")
    flops = _check(result, "flops")
    assert flops["passed"] is False and flops["numbers"]["ratio"] > 1.02
    assert "product 16 of 16: PyTorch matmul 1x256 by 256x1000 per sample" in flops["evidence"]
    for name in ("logits", "dropout", "loss_trajectory"):
        assert _check(result, name)["passed"] is None and "cannot be loaded into both" in _check(result, name)["skipped"]
    assert result["message"] == ("the TensorFlow kit's vgg16 cannot take the weights of the PyTorch kit's vgg16: "
                                 f"{layers['mismatches'][0]}")
    assert result["summary"].startswith(f"NOT equivalent: {layers['mismatches'][0]}; flops: ")
    assert result["spec_differences"] == ["pitfalls: PyTorch ['pt_head_1000'], TensorFlow []"]


@pytest.mark.slow
def test_the_kit_refuses_weights_of_another_model(kit_python, tiny_dir, data_dir, tmp_path):
    other = tmp_path / "other.npz"
    cert.save_weights(other, {"dense1.kernel": np.zeros((512, 4096), np.float32)})
    spec = tiny_specs(tiny_dir, data_dir)["tensorflow"]
    mismatch = ("does not match the model (62 canonical parameters): it lacks conv1.kernel, conv1.bias, "
                "batchnorm1.gamma and 58 more; dense1.kernel is (512, 4096), the model's is (64, 10)")
    for weights, expected in ((other, mismatch),
                              (tmp_path / "nothing.npz", "does not exist")):
        out = tmp_path / "side.json"
        proc = subprocess.run([str(kit_python("tensorflow")), "-m", "reprokit.kits.certify", "--spec",
                               str(write_spec(tmp_path, spec)), "--data-dir", str(data_dir), "--out", str(out),
                               "--weights-in", str(weights), "--steps", "1", "--dropout-passes", "2"],
                              cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 2
        assert expected in proc.stderr.strip().splitlines()[-1] and "Traceback" not in proc.stderr
        side = json.loads(out.read_text())
        assert side["status"] == "refused" and expected in side["message"] and side["layers"]

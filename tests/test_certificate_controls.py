"""The certificate's control pairs: a user's own models, from the user's own folder, certified for real.

Every pair is an experiment in one folder (``model.name = "custom"``, builders in
tests/cert_controls.py copied there), certified with the rest of the suite's certificates in one
call (tests/certified.py). Each class of difference without parameters has a failing pair and a
passing twin; equivalent models written differently pass; bad input fails in one sentence. A failing pair
names where it parts (PARTING, GRADIENT_PARTING): the first layer whose output differs and the settings of it
that differ, or none.
"""
from __future__ import annotations

import pytest
from certified import CONTROLS, GRADIENT_PARTING, JAX_CONTROLS, PARTING

pytestmark = pytest.mark.slow

MESSAGES = {
    "returns_probabilities": "cert_controls:torch_softmax returns probabilities, not logits: its last layer "
                             "10 (Softmax) makes every row non-negative and sum to 1, and the PyTorch kit's loss "
                             "takes logits",
    "wrong_output_shape": "cert_controls:keras_five_classes returns outputs of shape (8, 5) from its last layer "
                          "dense_1 (Dense); the experiment has 10 classes, so it must return (batch, 10) logits",
    "builder_raises": "the TensorFlow model builder cert_controls:keras_raises raised ValueError: no model for "
                      "width 8 (cert_controls.py, line",
    "cannot_take_the_weights": "cert_controls:keras_dense_12 cannot take the weights of cert_controls:torch_base: "
                               "dense 1 kernel: PyTorch (512, 16) vs TensorFlow (512, 12) (7.weight, dense/kernel)",
}


def _as_expected(result: dict, name: str) -> str:
    """The control's certificate has its expected status and fails at least the checks it must; its status."""
    _, _, kind, status, failing = CONTROLS[name]
    failed = {c["name"] for c in result["checks"] if c["passed"] is False}
    assert result["status"] == status, f"{kind}: {result['summary']}"
    assert set(failing) <= failed, f"{kind}: {failed} failed, expected {failing}: {result['summary']}"
    if status == "pass":
        assert not failed and result["message"] is None
    return status


@pytest.mark.parametrize("name", list(CONTROLS))
def test_control_pair(certified, name):
    result = certified[0][name]
    _as_expected(result, name)
    if name in MESSAGES:
        message = result["message"]
        assert message.startswith(MESSAGES[name]), message
        assert "\n" not in message and "Traceback" not in message
        assert result["summary"] in (f"not certified: {message}",) or result["summary"].startswith("NOT equivalent")


def test_the_structure_finding_names_the_place_and_both_sides(certified):
    checks = {c["name"]: c for c in certified[0]["dropout_place"]["checks"]}
    assert checks["layers_without_parameters"]["evidence"] == (
        "a layer without parameters differs: after product 2: PyTorch has padding (1, 1, 1, 1) (top, bottom, left, "
        "right); dropout rate 0.3, per element; relu; max pool 2x2, stride 2x2, output 8x8, padding (0, 0, 0, 0), "
        "TensorFlow has padding (1, 1, 1, 1) (top, bottom, left, right); relu; max pool 2x2, stride 2x2, output 8x8, "
        "padding (0, 0, 0, 0)")


def test_the_controls_by_class(certified):
    """One failing pair per class of difference, and passing twins: counted for the record."""
    results, _, cost, _ = certified
    by_class: dict[str, list[str]] = {}
    for name, (_, _, kind, _, _) in CONTROLS.items():
        by_class.setdefault(kind, []).append(results[name]["status"])
    print(f"\n{len(results)} certificates (of them {len(CONTROLS)} control pairs) in {cost['wall_s']:.1f} s "
          f"({cost['cpu_s']:.1f} CPU s), one process per framework:")
    for kind, statuses in by_class.items():
        print(f"  {kind}: {', '.join(statuses)}")
    fails = [k for k, v in by_class.items() if not k.startswith("twin") and "fail" in v]
    assert {"dropout present", "dropout rate", "dropout kind", "dropout place", "pooling kind", "pooling size",
            "activation", "padding semantics", "normalisation axis", "residual present", "residual place",
            "batchnorm momentum"} <= set(fails)
    assert all(s == "pass" for k, v in by_class.items() if k.startswith("twin") for s in v)


def _checks(result: dict) -> dict[str, dict]:
    return {c["name"]: c for c in result["checks"]}


@pytest.mark.parametrize("name", list(PARTING))
def test_the_first_layer_that_parts_is_named(certified, name):
    result = certified[0][name]
    message = _checks(result)["first_parting_layer"]["evidence"]
    assert message.startswith(PARTING[name]), message
    assert len(message) < 300 and "\n" not in message
    assert result["summary"].endswith(f"; {message}")


def test_the_parting_layers_settings_are_read_from_both_built_objects(certified):
    numbers = _checks(certified[0]["batchnorm_epsilon"])["first_parting_layer"]["numbers"]
    pt, tf = numbers["pytorch"]["settings"], numbers["tensorflow"]["settings"]
    assert (pt["epsilon"], tf["epsilon"]) == (1e-5, 1e-3)
    # Keras's momentum 0.9 is PyTorch's 0.1, in the canonical form: not a difference
    assert pt["momentum"] == pytest.approx(tf["momentum"]) == pytest.approx(0.1)
    assert pt["axis"] == tf["axis"] == [3] and numbers["differs"] == ["epsilon 1e-05 vs 0.001"]
    lacking = _checks(certified[0]["layer_in_one_only"])["first_parting_layer"]["numbers"]
    assert lacking["tensorflow"] is None and lacking["lacks"] == "tensorflow"


def test_a_batchnorm_momentum_no_step_shows_is_named_from_the_built_layers(certified):
    """Keras's default momentum 0.99 against PyTorch's 0.1: the logits and trajectories agree (training mode uses
    the batch's statistics), and the normalisation settings name it."""
    checks = _checks(certified[0]["batchnorm_momentum"])
    assert checks["logits"]["passed"] and checks["loss_trajectory"]["passed"]
    assert checks["normalisation_settings"]["evidence"] == (
        "normalisation layer 1 of 1, PyTorch 3 (BatchNorm2d) / TensorFlow batch_normalization (BatchNormalization): "
        "momentum 0.1 vs 0.01")
    assert checks["normalisation_settings"]["passed"] is False
    same = _checks(certified[0]["normalisation_axis_same"])["normalisation_settings"]
    assert same["passed"] and same["evidence"].startswith("the same settings in all 1 normalisation layers")


@pytest.mark.parametrize("name", list(GRADIENT_PARTING))
def test_the_first_gradient_that_parts_is_named(certified, name):
    checks = _checks(certified[0][name])
    assert "no layer parts" in checks["first_parting_layer"]["evidence"]
    assert GRADIENT_PARTING[name] in checks["first_parting_gradient"]["evidence"], checks["first_parting_gradient"]


def test_a_pair_that_agrees_names_no_parting(certified):
    results = certified[0]
    passing = [n for n, (_, _, _, status, _) in CONTROLS.items() if status == "pass"]
    assert "offset_same" in passing and "normalisation_axis_same" in passing
    for name in passing:
        assert not {"first_parting_layer", "first_parting_gradient"} & set(_checks(results[name])), name


# -- the same control pairs, PyTorch against JAX ------------------------------------------------------------

@pytest.mark.parametrize("name", list(JAX_CONTROLS))
def test_control_pair_pytorch_jax(certified_jax, name):
    result = certified_jax[0][name]
    if _as_expected(result, name) == "pass":
        assert not {"first_parting_layer", "first_parting_gradient"} & set(_checks(result)), name


def test_the_jax_controls_by_class(certified_jax):
    """Every failing class of a layer without parameters fails against JAX too, every twin passes: counted."""
    results, cost = certified_jax
    by_class: dict[str, list[str]] = {}
    for name in JAX_CONTROLS:
        by_class.setdefault(CONTROLS[name][2], []).append(results[name]["status"])
    print(f"\n{len(results)} PyTorch/JAX control pairs in {cost['wall_s']:.1f} s ({cost['cpu_s']:.1f} CPU s):")
    for kind, statuses in by_class.items():
        print(f"  {kind}: {', '.join(statuses)}")
    fails = [k for k, v in by_class.items() if not k.startswith("twin") and "fail" in v]
    assert {"dropout present", "dropout rate", "dropout kind", "dropout place", "pooling kind", "pooling size",
            "activation", "padding semantics", "normalisation axis", "residual place", "optimizer"} <= set(fails)
    twins = {kind for _, _, kind, _, _ in CONTROLS.values() if kind.startswith("twin")}
    assert twins <= set(by_class)
    assert all(s == "pass" for k in twins for s in by_class[k])


@pytest.mark.parametrize("name", ["activation", "padding_same", "normalisation_axis", "batchnorm_epsilon"])
def test_the_jax_side_parts_where_tensorflow_does(certified_jax, name):
    """The same layer, the same difference of its output and the same settings as the PyTorch/TensorFlow pair's."""
    message = _checks(certified_jax[0][name])["first_parting_layer"]["evidence"]
    pytorch, tensorflow = PARTING[name].split(" / TensorFlow ")
    assert message.startswith(f"{pytorch} / JAX layers/"), message
    assert message.endswith(tensorflow.split("): ", 1)[1]), message


def test_the_jax_momentum_parts_in_the_gradients(certified_jax):
    checks = _checks(certified_jax[0]["momentum"])
    assert "no layer parts" in checks["first_parting_layer"]["evidence"]
    assert ("the gradients first part at step 3, first in backward order at dense2.bias (PyTorch 9.bias / JAX "
            "layers/9.bias)") in checks["first_parting_gradient"]["evidence"]

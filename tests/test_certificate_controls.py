"""The certificate's control pairs: a user's own models, from the user's own folder, certified for real.

Every pair below is an experiment in one folder (``model.name = "custom"``, builders in
tests/cert_controls.py copied there). All are certified in one call, so the whole table costs one
PyTorch process and one TensorFlow process. Each class of difference without parameters has a failing
pair and a passing twin; equivalent models written differently pass; bad input fails in one sentence.
"""
from __future__ import annotations

import shutil
import textwrap
import time
from pathlib import Path

import pytest
from conftest import TINY

from reprokit import certificate
from reprokit.experiments import load
from reprokit.plan import Options, specs_for

pytestmark = pytest.mark.slow
FRAMEWORKS = ("pytorch", "tensorflow")

# name: (PyTorch builder, TensorFlow builder, class, expected status, the checks that must fail)
PAIRS = {
    "base": ("torch_base", "keras_base", "baseline", "pass", ()),
    # Equivalent models written differently (no false alarms)
    "explicit_padding": ("torch_explicit_pad_first", "keras_explicit_pad", "twin: padding", "pass", ()),
    "functional_activations": ("torch_functional", "keras_fused_activation", "twin: activation", "pass", ()),
    "bias_outside_its_layer": ("torch_bias_outside", "keras_base", "twin: bias", "pass", ()),
    "flatten_hwc_in_pytorch": ("torch_flatten_hwc", "keras_base", "twin: flatten order", "pass", ()),
    "flatten_chw_in_keras": ("torch_base", "keras_flatten_chw", "twin: flatten order", "pass", ()),
    # Differences without parameters (no blind spots), each beside its passing twin
    "dropout_same": ("torch_dropout", "keras_dropout", "twin: dropout", "pass", ()),
    "dropout_present": ("torch_dropout", "keras_base", "dropout present", "fail",
                        ("dropout", "layers_without_parameters")),
    "dropout_rate": ("torch_dropout", "keras_dropout_rate", "dropout rate", "fail",
                     ("dropout", "layers_without_parameters")),
    "dropout_kind_same": ("torch_channel_dropout", "keras_channel_dropout", "twin: dropout kind", "pass", ()),
    "dropout_kind": ("torch_channel_dropout", "keras_element_dropout_conv1", "dropout kind", "fail",
                     ("dropout", "layers_without_parameters")),
    "dropout_place": ("torch_dropout_conv2", "keras_dropout", "dropout place", "fail",
                      ("dropout", "layers_without_parameters")),
    "pooling_kind": ("torch_base", "keras_avg_pool", "pooling kind", "fail", ("layers_without_parameters", "logits")),
    "pooling_size_same": ("torch_global", "keras_global", "twin: pooling size", "pass", ()),
    "pooling_size": ("torch_global", "keras_global_pool3", "pooling size", "fail",
                     ("layers_without_parameters", "logits")),
    "activation": ("torch_base", "keras_elu", "activation", "fail", ("layers_without_parameters", "logits")),
    "padding_same": ("torch_stride2", "keras_stride2", "padding semantics", "fail",
                     ("layers_without_parameters", "logits")),
    "normalisation_axis_same": ("torch_batchnorm", "keras_batchnorm", "twin: normalisation axis", "pass", ()),
    "normalisation_axis": ("torch_batchnorm", "keras_batchnorm_axis1", "normalisation axis", "fail",
                           ("layers_without_parameters", "logits")),
    # A planted optimizer difference: the TensorFlow spec's momentum is 0.95 (below)
    "momentum": ("torch_base", "keras_base", "optimizer", "fail", ("optimizer", "loss_trajectory",
                                                                   "loss_trajectory_fp32")),
    # Bad input: a failed certificate whose message is one sentence naming the function and layer
    "returns_probabilities": ("torch_softmax", "keras_base", "bad input", "fail", ("outputs",)),
    "wrong_output_shape": ("torch_base", "keras_five_classes", "bad input", "fail", ()),
    "builder_raises": ("torch_base", "keras_raises", "bad input", "fail", ()),
    "cannot_take_the_weights": ("torch_base", "keras_dense_12", "bad input", "fail", ("layers",)),
}

MESSAGES = {
    "returns_probabilities": "cert_controls:torch_softmax returns probabilities, not logits: its last layer "
                             "10 (Softmax) makes every row non-negative and sum to 1, and the PyTorch kit's loss "
                             "takes logits",
    "wrong_output_shape": "cert_controls:keras_five_classes returns outputs of shape (8, 5) from its last layer "
                          "dense_1 (Dense); the experiment has 10 classes, so it must return (batch, 10) logits",
    "builder_raises": "the TensorFlow model builder cert_controls:keras_raises raised ValueError: no model for "
                      "width 8 (cert_controls.py, line",
    "cannot_take_the_weights": "cert_controls:keras_dense_12 cannot take the weights of cert_controls:torch_base: "
                               "dense 1 kernel: PyTorch (512, 16) vs TensorFlow (512, 12)",
}


def _toml(name: str, pytorch: str, tensorflow: str) -> str:
    spec = TINY.replace('name = "tiny"', f'name = "{name}"')
    spec = spec.replace("batch_size = 32", "batch_size = 16")
    start, end = spec.index("[model]"), spec.index("[data]")
    return spec[:start] + textwrap.dedent(f'''\
        [model]
        name = "custom"
        num_classes = 10
        width_multiplier = 1.0
        pytorch = "cert_controls:{pytorch}"
        tensorflow = "cert_controls:{tensorflow}"
        options = {{ width = 8 }}

        ''') + spec[end:]


@pytest.fixture(scope="module")
def certified(kit_python, tmp_path_factory, data_dir):
    """Every pair certified in one call; the results by name, and the wall time."""
    folder = tmp_path_factory.mktemp("my-controls")
    shutil.copy(Path(__file__).with_name("cert_controls.py"), folder / "cert_controls.py")
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=FRAMEWORKS, data_dir=data_dir,
                   allow_download=False)
    pairs = []
    for name, (pt, tf, *_) in PAIRS.items():
        (folder / f"{name}.toml").write_text(_toml(name, pt, tf))
        specs = {s["framework"]: s for s in specs_for(load(folder / f"{name}.toml"), opts, lambda fw: {
            "lock": None, "lock_sha256": None, "image": None}, {})}
        if name == "momentum":
            specs["tensorflow"]["train"] = {**specs["tensorflow"]["train"],
                                            "optimizer": {**specs["tensorflow"]["train"]["optimizer"], "momentum": 0.95}}
        pairs.append(specs)
    work = tmp_path_factory.mktemp("work")
    t0 = time.perf_counter()
    results = certificate.certify_many(pairs, {fw: kit_python(fw) for fw in FRAMEWORKS}, data_dir,
                                       [work / name for name in PAIRS], extra_paths=(folder,))
    return dict(zip(PAIRS, results)), time.perf_counter() - t0


@pytest.mark.parametrize("name", list(PAIRS))
def test_control_pair(certified, name):
    results, _ = certified
    result = results[name]
    _, _, kind, status, failing = PAIRS[name]
    failed = {c["name"] for c in result["checks"] if c["passed"] is False}
    assert result["status"] == status, f"{kind}: {result['summary']}"
    assert set(failing) <= failed, f"{kind}: {failed} failed, expected {failing}: {result['summary']}"
    if status == "pass":
        assert not failed and result["message"] is None
    if name in MESSAGES:
        message = result["message"]
        assert message.startswith(MESSAGES[name]), message
        assert "\n" not in message and "Traceback" not in message


def test_the_controls_by_class(certified):
    """One failing pair per class of difference, and passing twins: counted for the record."""
    results, wall = certified
    by_class: dict[str, list[str]] = {}
    for name, (_, _, kind, _, _) in PAIRS.items():
        by_class.setdefault(kind, []).append(results[name]["status"])
    print(f"\n{len(PAIRS)} control pairs certified in {wall:.1f} s (one process per framework):")
    for kind, statuses in by_class.items():
        print(f"  {kind}: {', '.join(statuses)}")
    fails = [k for k, v in by_class.items() if not k.startswith("twin") and "fail" in v]
    assert {"dropout present", "dropout rate", "dropout kind", "dropout place", "pooling kind", "pooling size",
            "activation", "padding semantics", "normalisation axis"} <= set(fails)
    assert all(s == "pass" for k, v in by_class.items() if k.startswith("twin") for s in v)

"""Every real-kit equivalence certificate of the test suite, made in one call per batch.

``certify_all`` certifies the built-in models (the tests' tiny SimpleCNN, the quick VGG16 and ResNet-50) and
the control pairs (a user's own models, from a folder of the user's own) with
``reprokit.certify.certificate.certify_many``: one PyTorch process and one TensorFlow process for all of
them; ``certify_jax`` the JAX controls. conftest.py starts each batch as a process of its own at the
session's first test (``python tests/certified.py BATCH FOLDER DATA_DIR OUT``: its kit processes are not the
pytest process's children, whose signal tests stop every run they started); the session fixtures
``certified`` and ``certified_jax`` read what it wrote, for tests/test_certificate.py and
tests/test_certificate_controls.py.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import textwrap
import time
from pathlib import Path

from conftest import TINY, tiny_specs

from reprokit.certify import certificate
from reprokit.environments.envs import ENVS
from reprokit.execute import data_step
from reprokit.plan.experiments import BUILTIN_DIR, load
from reprokit.plan.plan import Options, specs_for
from reprokit.runners.local import LocalRunner

FRAMEWORKS = ("pytorch", "tensorflow")
REDUCED_BUDGET = 1.5e11      # FLOPs: above the 48x48 quick VGG16's 1.2e11, below the 64x64 one's 2.1e11

# Control pairs: name -> (PyTorch builder, TensorFlow builder, class, expected status, checks that must fail),
# builders from tests/cert_controls.py.
CONTROLS = {
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
    # A residual connection (ResNet's): added in both, in one only, before or after the activation
    "residual_same": ("torch_residual", "keras_residual", "twin: residual", "pass", ()),
    "residual_in_one": ("torch_residual", "keras_no_skip", "residual present", "fail",
                        ("layers_without_parameters", "logits")),
    "residual_place": ("torch_residual", "keras_residual_after", "residual place", "fail",
                       ("layers_without_parameters", "logits")),
    # Where they part (PARTING below): a numeric setting, arithmetic with every setting equal, a layer one lacks
    "batchnorm_epsilon": ("torch_batchnorm", "keras_batchnorm_epsilon", "batchnorm epsilon", "fail",
                          ("logits", "loss_trajectory")),
    # Keras's default momentum (0.99, PyTorch's 0.01): no step or output from the initial weights shows it
    "batchnorm_momentum": ("torch_batchnorm", "keras_batchnorm_momentum", "batchnorm momentum", "fail",
                           ("normalisation_settings",)),
    "offset_same": ("torch_offset", "keras_offset", "twin: a layer of the user's own", "pass", ()),
    "offset_in_one": ("torch_offset", "keras_no_offset", "arithmetic of a layer of the user's own", "fail",
                      ("logits", "loss_trajectory")),
    "layer_in_one_only": ("torch_offset", "keras_base", "a layer one framework lacks", "fail",
                          ("logits", "loss_trajectory")),
    # A planted optimizer difference: the TensorFlow spec's momentum is 0.95 (below)
    "momentum": ("torch_base", "keras_base", "optimizer", "fail",
                 ("optimizer", "loss_trajectory", "loss_trajectory_fp32")),
    # Bad input: a failed certificate whose message is one sentence naming the function and layer
    "returns_probabilities": ("torch_softmax", "keras_base", "bad input", "fail", ("outputs",)),
    "wrong_output_shape": ("torch_base", "keras_five_classes", "bad input", "fail", ()),
    "builder_raises": ("torch_base", "keras_raises", "bad input", "fail", ()),
    "cannot_take_the_weights": ("torch_base", "keras_dense_12", "bad input", "fail", ("layers",)),
}


# Where the failing pairs part, from the layers' outputs (reprokit/kits/framework_free/parting.py): the first_parting_layer check's
# message must start with this; the gradient's, for a pair whose forward passes agree.
PARTING = {
    "batchnorm_epsilon": "first parts at PyTorch 3 (BatchNorm2d) / TensorFlow batch_normalization (BatchNormalization): "
                         "output differs 4.9e-04 of its scale; settings that differ: epsilon 1e-05 vs 0.001",
    "offset_in_one": "first parts at PyTorch 2 (Offset) / TensorFlow offset (Offset): output differs 9.6e-04 of its "
                     "scale; no setting differs",
    "layer_in_one_only": "first parts at PyTorch 2 (Offset), a layer TensorFlow lacks; the outputs agree through "
                         "PyTorch 1 (ReLU) / TensorFlow re_lu (ReLU)",
    "activation": "first parts at PyTorch 1 (ReLU) / TensorFlow activation (Activation): output differs 5.3e-01 of "
                  "its scale; settings that differ: activation relu vs elu",
    "padding_same": "first parts at PyTorch 0 (Conv2d) / TensorFlow conv2d (Conv2D): output differs 8.4e-01 of its "
                    "scale; settings that differ: padding (1, 1, 1, 1) vs (0, 1, 0, 1)",
    "pooling_kind": "first parts at PyTorch 2 (MaxPool2d) / TensorFlow average_pooling2d (AveragePooling2D): output "
                    "differs 3.2e-01 of its scale; settings that differ: pool max vs avg",
    "pooling_size": "first parts at PyTorch 5 (MaxPool2d) / TensorFlow max_pooling2d_1 (MaxPooling2D): output shapes "
                    "(2, 8, 8, 8) vs (2, 5, 5, 8); settings that differ: pool_size (2, 2) vs (3, 3); strides (2, 2) vs "
                    "(3, 3)",
    "normalisation_axis": "first parts at PyTorch 3 (BatchNorm2d) / TensorFlow batch_normalization "
                          "(BatchNormalization): output differs 9.9e-01 of its scale; settings that differ: axis (3) "
                          "vs (1) (in training mode: the evaluation-mode outputs agree)",
    # the kit's own SimpleCNN, its TensorFlow spec's epsilon changed
    "tiny_batchnorm_epsilon": "first parts at PyTorch 3 (BatchNorm2d) / TensorFlow batch_normalization "
                              "(BatchNormalization): output differs 4.9e-04 of its scale; settings that differ: "
                              "epsilon 1e-05 vs 0.001",
}
GRADIENT_PARTING = {
    "momentum": "the gradients first part at step 3, first in backward order at dense2.bias (PyTorch 9.bias / "
                "TensorFlow dense_1/bias)",
}


# The control pairs again, PyTorch against JAX (tests/cert_controls_jax.py): name -> the JAX builder; class, status
# and failing checks as in CONTROLS. A subset that fits the suite's time (one JAX process for all of them):
# every class of twin at least once, every failing class of a layer without parameters, the momentum and
# one parting pair (a setting of BatchNorm), and one bad input.
JAX_CONTROLS = {
    "base": "jax_base",
    "explicit_padding": "jax_explicit_pad",
    "functional_activations": "jax_functional",
    "bias_outside_its_layer": "jax_base",
    "flatten_chw_in_keras": "jax_flatten_chw",      # here: a (c, h, w) flatten in JAX
    "dropout_same": "jax_dropout",
    "dropout_present": "jax_base",
    "dropout_rate": "jax_dropout_rate",
    "dropout_kind_same": "jax_channel_dropout",
    "dropout_kind": "jax_element_dropout_conv1",
    "dropout_place": "jax_dropout",
    "pooling_kind": "jax_avg_pool",
    "pooling_size_same": "jax_global",
    "pooling_size": "jax_global_pool3",
    "activation": "jax_elu",
    "padding_same": "jax_stride2",
    "normalisation_axis_same": "jax_batchnorm",
    "normalisation_axis": "jax_batchnorm_axis1",
    "batchnorm_epsilon": "jax_batchnorm_epsilon",
    "offset_same": "jax_offset",
    "residual_same": "jax_residual",
    "residual_place": "jax_residual_after",
    "momentum": "jax_base",
    "cannot_take_the_weights": "jax_dense_12",
}


def _control_toml(name: str, pytorch: str, tensorflow: str, jax: str | None = None) -> str:
    spec = TINY.replace('name = "tiny"', f'name = "{name}"').replace("batch_size = 32", "batch_size = 16")
    start, end = spec.index("[model]"), spec.index("[data]")
    return spec[:start] + textwrap.dedent(f'''\
        [model]
        name = "custom"
        num_classes = 10
        width_multiplier = 1.0
        pytorch = "cert_controls:{pytorch}"
        tensorflow = "cert_controls:{tensorflow}"
        {f'jax = "cert_controls_jax:{jax}"' if jax else ""}
        options = {{ width = 8 }}

        ''') + spec[end:]


def _planned(path: Path, opts: Options, code: dict | None = None) -> dict[str, dict]:
    none = {"lock": None, "lock_sha256": None, "image": None}
    # A copy: the planned specs of one experiment share their nested sections.
    return json.loads(json.dumps({s.framework: s.to_dict() for s in specs_for(load(path), opts, lambda fw: none, code or {})}))


def _builtin(folder: Path, data_dir: Path, opts: Options) -> dict[str, dict[str, dict]]:
    (folder / "tiny.toml").write_text(TINY)
    tiny = json.loads(json.dumps(tiny_specs(folder, data_dir)))
    epsilon = json.loads(json.dumps(tiny))
    epsilon["tensorflow"]["model"]["batchnorm"]["epsilon"] = 1e-3
    vgg = _planned(BUILTIN_DIR / "vgg16_cifar10_speed.toml", opts)
    head = _planned(BUILTIN_DIR / "vgg16_cifar10_speed.toml", opts)
    head["pytorch"]["pitfalls"] = ["pt_head_1000"]
    for spec in (*vgg.values(), *head.values()):
        # The tiny experiment's threads, so that one process per framework certifies everything
        # (certify_many starts one per thread setting); the threads change no figure checked here.
        spec["numerics"]["cpu_threads"] = tiny["pytorch"]["numerics"]["cpu_threads"]
    # At 64x64 its dropout passes and trajectories cost more than REDUCED_BUDGET: certified at a reduced width.
    larger = _planned(BUILTIN_DIR / "vgg16_cifar10_speed.toml", opts)
    for spec in larger.values():
        spec["data"]["input_size"] = 64
        spec["numerics"]["cpu_threads"] = tiny["pytorch"]["numerics"]["cpu_threads"]
    # ResNet-50 as reproduce certifies it on the CPU (quick: width 0.125, 32x32): residual adds, 53 BatchNorms
    resnet = _planned(BUILTIN_DIR / "resnet50_imagenet_speed.toml", opts)
    for spec in resnet.values():
        spec["numerics"]["cpu_threads"] = tiny["pytorch"]["numerics"]["cpu_threads"]
    # and against keras.applications' stock ResNet50 (the stock variant's TensorFlow side)
    stock = json.loads(json.dumps(resnet))
    stock["tensorflow"]["pitfalls"] = ["tf_keras_applications_resnet50"]
    return {"tiny": tiny, "tiny_batchnorm_epsilon": epsilon, "vgg": vgg, "vgg_head_1000": head, "vgg_64_reduced": larger,
            "resnet": resnet, "resnet_stock": stock}


def _folder(root: Path, name: str) -> Path:
    (root / name).mkdir(parents=True)
    return root / name


def certify_all(root: Path, data_dir: Path) -> tuple[dict[str, dict], dict[str, Path], dict,
                                                     dict[str, dict[str, dict]]]:
    """Results and work dirs by name, the wall and CPU seconds of the one call (CPU: of the two framework
    processes, which a shared machine's load does not inflate as it does the wall time), and each
    side's own findings by name and framework; every folder under ``root``."""
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=FRAMEWORKS,
                   data=data_step.Preparing(data_dir, allow_download=False))
    pairs = _builtin(_folder(root, "experiments"), data_dir, opts)
    folder = _folder(root, "my-controls")
    shutil.copy(Path(__file__).with_name("cert_controls.py"), folder / "cert_controls.py")
    for name, (pt, tf, *_) in CONTROLS.items():
        (folder / f"{name}.toml").write_text(_control_toml(name, pt, tf))
        pairs[name] = _planned(folder / f"{name}.toml", opts)
    pairs["momentum"]["tensorflow"]["train"]["optimizer"]["momentum"] = 0.95
    work = _folder(root, "certificates")
    works = {name: work / name for name in pairs}
    runner = LocalRunner(ENVS, data_dir, "cpu", extra_paths=(folder, *_recorder()))
    t0, cpu0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    results = certificate.certify_many(list(pairs.values()), runner, list(works.values()),
                                       trajectory_budget=REDUCED_BUDGET)
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    cost = {"wall_s": time.perf_counter() - t0, "cpu_s": cpu.ru_utime + cpu.ru_stime - cpu0.ru_utime - cpu0.ru_stime}
    batch = works[next(iter(pairs))] / "batch-0"          # one thread setting: one batch folder
    sides = {name: {fw: json.loads(p.read_text()) for fw in FRAMEWORKS
                    if (p := batch / fw / str(i) / certificate.SIDE_NAME).exists()} for i, name in enumerate(pairs)}
    return dict(zip(pairs, results)), works, cost, sides


def certify_jax(root: Path, data_dir: Path) -> tuple[dict[str, dict], dict]:
    """The JAX_CONTROLS pairs, PyTorch against JAX, in one call (one process per framework): results by name,
    and the wall and CPU seconds of the call; every folder under ``root``."""
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("pytorch", "jax"),
                   data=data_step.Preparing(data_dir, allow_download=False))
    folder = _folder(root, "my-jax-controls")
    for module in ("cert_controls.py", "cert_controls_jax.py"):
        shutil.copy(Path(__file__).with_name(module), folder / module)
    pairs = {}
    for name, jax in JAX_CONTROLS.items():
        pt, tf, *_ = CONTROLS[name]
        (folder / f"{name}.toml").write_text(_control_toml(name, pt, tf, jax))
        pairs[name] = _planned(folder / f"{name}.toml", opts)
    pairs["momentum"]["jax"]["train"]["optimizer"]["momentum"] = 0.95
    work = _folder(root, "jax-certificates")
    runner = LocalRunner(ENVS, data_dir, "cpu", extra_paths=(folder, *_recorder()))
    t0, cpu0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    results = certificate.certify_many(list(pairs.values()), runner, [work / name for name in pairs])
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    cost = {"wall_s": time.perf_counter() - t0, "cpu_s": cpu.ru_utime + cpu.ru_stime - cpu0.ru_utime - cpu0.ru_stime}
    return dict(zip(pairs, results)), cost


def _recorder() -> tuple[Path, ...]:
    """The folder whose sitecustomize records what the kit processes read, where the suite asked for it."""
    import batch_cache
    return (batch_cache.RECORDER,) if os.environ.get(batch_cache.RECORD_ENV) else ()


BATCHES = {"certified": certify_all, "certified_jax": certify_jax}


def read_made(out: Path, batch: str) -> tuple:
    """What ``main`` wrote for a batch, in the shapes the batch returns (work folders as Paths)."""
    got = json.loads(out.read_text())
    if batch == "certified":
        return got["results"], {k: Path(v) for k, v in got["works"].items()}, got["cost"], got["sides"]
    return got["results"], got["cost"]


def main(argv: list[str]) -> None:
    """python tests/certified.py BATCH ROOT DATA_DIR OUT: make one batch, write its return as JSON to OUT."""
    batch, root, data_dir, out = argv
    made = BATCHES[batch](Path(root), Path(data_dir))
    if batch == "certified":
        results, works, cost, sides = made
        body = {"results": results, "works": {k: str(v) for k, v in works.items()}, "cost": cost, "sides": sides}
    else:
        results, cost = made
        body = {"results": results, "cost": cost}
    Path(out).write_text(json.dumps(body))


if __name__ == "__main__":
    main(sys.argv[1:])

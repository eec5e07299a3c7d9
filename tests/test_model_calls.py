"""The certificate calls each model as its script called it (tests/corpus/model_calls/).

Three scripts that the certificate once called as ``model(x)``, each certified against a twin in the other framework
(a pass) and against a planted twin that differs in one layer (a fail that names that layer):

- a Flax NNX model called as ``model(images, rngs)``, its dropout drawn from the Rngs the step passes, against the
  Flax example's PyTorch twin (tests/corpus/flax_scripts/twins/);
- the Keras basic-classification tutorial (``Flatten(input_shape=(28, 28))``, fit on arrays: no call of the model
  before its first step), against a PyTorch twin whose batches are (N, 1, 28, 28);
- a PyTorch model called with a keyword argument that returns a dict, its loss reading ``outputs["logits"]``,
  against a Keras twin.

Each pair runs through the local runner, each script under the probe to its first training step; then a call that
cannot be replayed (a function among the model's arguments) ends the certificate in one sentence.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from checkout import REPO

from reprokit import cli
from reprokit.certify.script_certificate import certify_scripts
from reprokit.environments import requirement_sets
from reprokit.environments.envs import ENVS
from reprokit.execute import compose
from reprokit.kits.framework_free import model_call, stand_ins
from reprokit.runners.local import LocalRunner

CORPUS = REPO / "tests" / "corpus"
CALLS = CORPUS / "model_calls"
NNX = f"jax={CALLS / 'nnx_rngs' / 'train.py'} --data-dir data"
PAIRS = {
    "nnx_rngs": (f"pytorch={CORPUS / 'flax_scripts' / 'twins' / 'mnist_torch.py'}", NNX),
    "nnx_rngs_planted": (f"pytorch={CORPUS / 'flax_scripts' / 'twins' / 'mnist_torch_planted.py'}", NNX),
    "sequential": (f"pytorch={CALLS / 'sequential_input_shape' / 'fashion_torch.py'}",
                   f"tensorflow={CORPUS / 'fashion_quickstarts' / 'classification_keras.py'}"),
    "sequential_planted": (f"pytorch={CALLS / 'sequential_input_shape' / 'fashion_torch_planted.py'}",
                           f"tensorflow={CORPUS / 'fashion_quickstarts' / 'classification_keras.py'}"),
    "dict": (f"pytorch={CALLS / 'dict_outputs' / 'net_torch.py'}",
             f"tensorflow={CALLS / 'dict_outputs' / 'net_keras.py'}"),
    "dict_planted": (f"pytorch={CALLS / 'dict_outputs' / 'net_torch.py'}",
                     f"tensorflow={CALLS / 'dict_outputs' / 'net_keras_planted.py'}"),
}
pytestmark = pytest.mark.slow


def _certify(name: str, scripts: tuple[str, str], root: Path, data_dir: Path, extra: tuple[str, ...] = ()) -> dict:
    frameworks = ",".join(s.split("=", 1)[0] for s in scripts)
    parsed = cli.parse(["--script", scripts[0], "--script", scripts[1], *extra, "--frameworks", frameworks,
                        "--backend", "local", "--profile", "quick", "--data-dir", str(data_dir),
                        "--state-dir", str(root / name / "state")])
    pair = {s.framework: s.to_dict() for s in compose.build(parsed).specs}
    requirement_sets.install_all(pair.values())       # as the command does before any run (matplotlib for Keras)
    return certify_scripts(pair, LocalRunner(ENVS, data_dir, "cpu"), root / name / "certificate")


@pytest.fixture(scope="module")
def certificates(kit_python, data_dir, tmp_path_factory) -> dict[str, dict]:
    for fw in ("pytorch", "tensorflow", "jax"):
        kit_python(fw)
    root = tmp_path_factory.mktemp("model_calls")
    mnist = root / "mnist"            # the NNX script's --data-dir: MNIST's arrays as mnist.npz (the stand-in's)
    mnist.mkdir()
    x_train, y_train, x_test, y_test = stand_ins.generate("mnist", 256, 64, 0)
    np.savez(mnist / "mnist.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    made = {}
    for name, scripts in PAIRS.items():
        extra = ("--data", f"jax:./data={mnist}") if scripts[1].startswith("jax=") else ()
        made[name] = _certify(name, scripts, root, data_dir, extra)
        print(f"\n{name}: {made[name]['status']}: {made[name]['summary']}")       # what -s shows of each
    return made


def _checks(cert: dict) -> dict[str, dict]:
    return {c["name"]: c for c in cert["checks"]}


def test_a_flax_model_called_with_its_rngs_is_replayed_with_them(certificates):
    cert = certificates["nnx_rngs"]
    assert cert["status"] == "pass", cert["summary"]
    assert cert["calls"]["jax"]["call"] == "CNN(x, rngs=an nnx.Rngs (the step's own, by value))"
    assert [a["role"] for a in cert["calls"]["jax"]["arguments"]] == ["batch", "rng"]
    checks = _checks(cert)
    assert max(v["relative"] for v in checks["logits"]["numbers"].values() if v) < 1e-5
    # its dropout draws from the replayed Rngs afresh on every training-mode pass, as the script's would
    assert checks["dropout"]["passed"], checks["dropout"]["evidence"]


def test_a_keras_model_whose_shape_comes_from_input_shape_takes_the_other_sides_batch(certificates):
    cert = certificates["sequential"]
    assert cert["status"] == "pass", cert["summary"]
    checks = _checks(cert)
    # PyTorch's (N, 1, 28, 28) batch, in Keras's (N, 28, 28): the same weights on the same numbers
    assert checks["layers"]["numbers"]["parameters"] == {"pytorch": 101770, "tensorflow": 101770}
    assert max(v["relative"] for v in checks["logits"]["numbers"].values() if v) < 1e-5
    assert cert["calls"]["tensorflow"]["call"] == "Sequential(inputs)"


def test_a_pytorch_model_called_with_a_keyword_is_compared_at_the_part_its_loss_read(certificates):
    cert = certificates["dict"]
    assert cert["status"] == "pass", cert["summary"]
    call = cert["calls"]["pytorch"]
    assert call["call"] == "Net(x, return_features=True)"
    assert (call["compared"], call["compared_why"]) == ("output['logits']", "the part the script's loss read")


@pytest.mark.parametrize(("name", "parting"), [
    ("nnx_rngs_planted", "first parts at PyTorch bn1 (BatchNorm2d) / JAX bn1 (BatchNorm)"),
    ("sequential_planted", "first parts at PyTorch 2 (LeakyReLU) / TensorFlow dense.activation (relu)"),
    ("dict_planted", "first parts at PyTorch bn1 (BatchNorm2d) / TensorFlow batch_normalization (BatchNormalization)"),
])
def test_each_planted_twin_fails_naming_the_layer_that_differs(certificates, name, parting):
    cert = certificates[name]
    checks = _checks(cert)
    assert cert["status"] == "fail" and not checks["logits"]["passed"], cert["summary"]
    assert checks["first_parting_layer"]["evidence"].startswith(parting), checks["first_parting_layer"]["evidence"]


CLOSURE = textwrap.dedent("""\
    import torch
    from torch import nn
    from torchvision import datasets, transforms

    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(28 * 28, 10)

        def forward(self, x, noise):
            return self.fc(torch.flatten(x, 1) + noise())

    train = datasets.MNIST("data", train=True, download=True, transform=transforms.ToTensor())
    model = Noisy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scale = 0.01
    for x, y in torch.utils.data.DataLoader(train, batch_size=32):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x, lambda: scale * torch.randn(28 * 28)), y)
        loss.backward()
        optimizer.step()
    """)


def test_a_call_that_cannot_be_replayed_ends_the_certificate_in_one_sentence(kit_python, data_dir, tmp_path):
    kit_python("pytorch"), kit_python("tensorflow")
    (tmp_path / "noisy").mkdir()
    (tmp_path / "noisy" / "train.py").write_text(CLOSURE)
    cert = _certify("closure", (f"pytorch={tmp_path / 'noisy' / 'train.py'}",
                                f"tensorflow={CALLS / 'dict_outputs' / 'net_keras.py'}"), tmp_path, data_dir)
    print(f"\n{cert['summary']}")
    assert cert["status"] == "not-run"
    assert cert["message"] == (
        "the PyTorch side: the script calls its Noisy with noise = the function <lambda>, which the "
        "certificate cannot call it with again (it replays arrays, random-number objects, flags and plain objects): "
        "give the model that value as a setting, or certify a script that calls it with its batch alone")


# -- the record's framework-free rules, on the host --------------------------------------------------------

def test_a_reference_batch_is_reshaped_only_where_its_values_keep_their_order():
    images = np.arange(2 * 28 * 28, dtype=np.float32).reshape(2, 28, 28, 1)
    assert model_call.as_shape(images, (28, 28)).shape == (2, 28, 28)
    assert model_call.as_shape(images, (1, 28, 28)).shape == (2, 1, 28, 28)
    assert model_call.as_shape(images, (784,)).tolist() == images.reshape(2, 784).tolist()
    colour = np.zeros((2, 32, 32, 3), np.float32)
    assert model_call.as_shape(colour, (32, 32, 3)) is colour
    assert model_call.as_shape(colour, (3, 32, 32)) is None and model_call.as_shape(colour, (3072,)) is None


def test_the_part_compared_is_the_one_the_loss_read_else_a_declared_guess():
    logits, features = np.zeros((4, 10)), np.zeros((4, 8, 7, 7))
    is_array = lambda v: isinstance(v, np.ndarray)      # noqa: E731
    assert model_call.choose_part(logits, is_array, None, 4) == ((), "the model returns one array")
    read = model_call.choose_part({"features": features, "logits": logits}, is_array, lambda v: v is logits, 4)
    assert read == ((("key", "logits"),), "the part the script's loss read")
    guess = model_call.choose_part((features, logits), is_array, None, 4)
    assert guess[0] == (("index", 1),) and "did not see which part" in guess[1]
    assert model_call.path_text(guess[0]) == "output[1]"

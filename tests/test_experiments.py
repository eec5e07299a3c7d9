"""Experiment specs: the built-in ones load; bad input is refused with one clear message and exit 2."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from checkout import REPO
from conftest import TINY

from reprokit.errors import UserError
from reprokit.plan.experiments import BUILTIN_DIR, discover, load


def test_builtin_experiments_load_in_every_profile():
    exps = discover([BUILTIN_DIR])
    assert set(exps) == {"vgg16_cifar10_speed", "simplecnn_cifar10_memory", "resnet50_imagenet_speed"}
    speed = exps["vgg16_cifar10_speed"]
    assert speed.resolved("full")["data"]["input_size"] == 224
    assert speed.resolved("full")["train"] | {} == speed.doc["train"]
    quick = speed.resolved("quick")
    assert quick["model"]["width_multiplier"] < 1 and quick["data"]["dataset"] == "learnable"
    assert quick["model"]["classifier_width"] == 256 and quick["model"]["head"] == "flatten"


def _write(tmp_path: Path, old: str, new: str) -> Path:
    assert old in TINY, old
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.replace(old, new))
    return path


BAD = [
    # (what, old text, new text, words the message must contain)
    ("unknown key", 'seed = 0\n', 'seed = 0\nsede = 1\n', ["train.sede", "unknown key", "batch_size"]),
    ("wrong type", "batch_size = 32", 'batch_size = "32"', ["train.batch_size", "expected integer"]),
    ("unknown model", 'name = "simplecnn"', 'name = "resnet18"', ["model.name", "'resnet18' is not allowed", "vgg16", "simplecnn", "resnet50", "custom"]),
    ("unknown dataset", 'dataset = "learnable"', 'dataset = "imagenet"', ["data.dataset", "'imagenet' is not allowed", "cifar10"]),
    ("unknown optimizer", 'name = "sgd"', 'name = "rmsprop"', ["train.optimizer.name", "'rmsprop' is not allowed", "adam", "sgd"]),
    ("zero batch size", "batch_size = 32", "batch_size = 0", ["train.batch_size", "must be > 0"]),
    ("negative batch size", "batch_size = 32", "batch_size = -4", ["train.batch_size", "must be > 0"]),
    ("unknown framework", '"pytorch", "tensorflow"]', '"pytorch", "mxnet"]', ["experiment.frameworks.1", "'mxnet' is not allowed"]),
    # a builder is keyed by a registered framework's name, and only a custom model takes one
    ("builder of no framework", 'width_multiplier = 0.125\n', 'width_multiplier = 0.125\nmxnet = "m:f"\n',
     ["model.mxnet", "unknown key", "jax", "pytorch", "tensorflow"]),
    ("builder of a built-in model", 'width_multiplier = 0.125\n', 'width_multiplier = 0.125\njax = "m:f"\n',
     ["model.jax: only a custom model takes builders"]),
]


@pytest.mark.parametrize("what,old,new,words", BAD, ids=[b[0] for b in BAD])
def test_bad_spec_is_refused_with_file_key_and_allowed(tmp_path, what, old, new, words):
    path = _write(tmp_path, old, new)
    with pytest.raises(UserError) as info:
        load(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    for word in words:
        assert word in message, (word, message)
    assert "\n" not in message


def test_bad_value_in_a_profile_names_the_profile(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY + '\n[profiles.quick]\ntrain = { batch_size = 0 }\n')
    with pytest.raises(UserError, match=r"profile quick\): train.batch_size: must be > 0"):
        load(path)


def test_cli_refuses_bad_spec_before_any_run_with_exit_2(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "tiny.toml").write_text(TINY.replace('dataset = "learnable"', 'dataset = "mnist"'))
    proc = subprocess.run([sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(folder),
                           "--state-dir", str(tmp_path / "state"), "--reports-dir", str(tmp_path / "reports"),
                           "--backend", "local"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().startswith(f"error: {folder / 'tiny.toml'}: data.dataset: 'mnist' is not allowed; allowed: cifar10")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "state").exists(), "nothing may run before the spec is valid"


def test_invalid_toml_and_name_mismatch(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text("[experiment\nname=")
    with pytest.raises(UserError, match="not valid TOML"):
        load(broken)
    other = tmp_path / "other.toml"
    other.write_text(TINY)
    with pytest.raises(UserError, match="must match the file name 'other'"):
        load(other)

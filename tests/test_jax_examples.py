"""The corpus's JAX examples (tests/corpus/jax_examples/), run end to end through the CLI on the quick profile.

`examples/mnist_classifier.py` lives in a package and imports it (`from examples import datasets`), as JAX's own
MNIST example does; beside it lies a checkout of `jax/` that would stand in for the installed JAX. Given as a path,
the kit finds the package's root and runs it as `python -m examples.mnist_classifier` from there, as the example's
README says, without the checkout; given as `--script "jax=-m examples.mnist_classifier"` from that root, it is the
same run. `flax_mnist/train.py` logs through `flax.metrics.tensorboard`, which imports TensorFlow: in the JAX
environment the run fails inside Flax, and ends in one sentence naming the distribution and the flag that adds it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import REPO
from test_corpus import row

from reprokit.kits.framework_free import dataset_formats, stand_ins
from reprokit.kits.framework_free.data import Arrays
from reprokit.report import md
from reprokit.results import results

EXAMPLES = REPO / "tests" / "corpus" / "jax_examples"
pytestmark = pytest.mark.slow


def _reproduce(tmp_path: Path, name: str, script: str, cwd: Path, *extra: str) -> tuple[subprocess.CompletedProcess,
                                                                                       list[dict]]:
    state = tmp_path / name / "state"
    proc = subprocess.run(
        [sys.executable, "-m", "reprokit", "reproduce", "--script", script, "--frameworks", "jax", "--backend", "local",
         "--profile", "quick", "--no-certify", "--state-dir", str(state), "--data-dir", str(tmp_path / "data"),
         "--reports-dir", str(tmp_path / "reports"), "--name", name, *extra],
        cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    return proc, [json.loads(p.read_text()) for p in sorted((state / "results").glob("*.json"))]


@pytest.fixture(scope="module")
def mnist(tmp_path_factory) -> Path:
    """MNIST's gzipped idx files (the stand-in's), where the examples' datasets.py looks: data/mnist at the root."""
    folder = tmp_path_factory.mktemp("jax_examples") / "mnist"
    x_train, y_train, x_test, y_test = stand_ins.generate("mnist", 512, 128, 0)
    return dataset_formats.write_idx_gz(Arrays(x_train, y_train, x_test, y_test, ""), folder)


def test_the_example_inside_a_package_runs_as_its_module_given_either_way(kit_python, tmp_path, mnist):
    kit_python("jax")
    data = ["--data", f"jax:./data/mnist={mnist}"]
    by_path, found = _reproduce(tmp_path, "by_path", f"jax={EXAMPLES / 'examples' / 'mnist_classifier.py'}", REPO,
                                *data)
    assert by_path.returncode == 0, by_path.stdout[-3000:] + by_path.stderr[-3000:]
    by_module, found_m = _reproduce(tmp_path, "by_module", "jax=-m examples.mnist_classifier", EXAMPLES, *data)
    assert by_module.returncode == 0, by_module.stdout[-3000:] + by_module.stderr[-3000:]
    (r,), (m,) = found, found_m
    for one in (r, m):
        assert one["status"] == "ok" and results.problems(one) is None, one.get("failure")
        assert sum(one["effective"]["train_steps_per_epoch"]) == 3          # past its first step, to the bound
    # the same script, folder (the package's root), module and copy either way
    assert {k: v for k, v in r["spec"]["script"].items() if k != "mounts"} == \
        {k: v for k, v in m["spec"]["script"].items() if k != "mounts"}
    script = r["spec"]["script"]
    assert (script["folder"], script["path"], script["module"]) == (str(EXAMPLES), "examples/mnist_classifier.py",
                                                                    "examples.mnist_classifier")
    # the checkout of jax/ beside the examples is not copied (its __init__ would refuse the installed jaxlib)
    assert script["left_out"] == ["jax"] and not any(f.startswith("jax/") for f in script["files"])
    shims = r["probe"]["shims"]
    assert "runs as python -m examples.mnist_classifier from its root (the script imports its own package)" in shims
    assert ("jax/ is left out of the run's copy: a package named like a module of the framework's lock, which the "
            "script would import instead of the installed one") in shims
    report = (tmp_path / "reports" / "by_path" / "report.md").read_text()
    assert "jax/ is left out of the run" in report
    print("\n" + "\n".join([row(r, "not run (--no-certify)"), row(m, "not run (--no-certify)")]))


def test_a_module_missing_inside_a_dependency_ends_in_the_flag_that_adds_it(kit_python, tmp_path):
    kit_python("jax")
    proc, found = _reproduce(tmp_path, "flax", "jax=train.py --workdir=out", EXAMPLES / "flax_mnist")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (r,) = found
    assert r["status"] == "failed" and results.problems(r) is None
    said = ("the script raised ModuleNotFoundError: No module named 'tensorflow' (flax/metrics/tensorboard.py line "
            "22), which the jax environment lacks: add it with --require jax=tensorflow-cpu or a requirements.txt "
            "beside the script (tensorflow-cpu provides tensorflow)")
    assert r["failure"]["message"] == said and said in proc.stdout
    assert r["failure"]["missing_module"]["name"] == "tensorflow"
    assert md(said) in (tmp_path / "reports" / "flax" / "report.md").read_text()      # its failed-runs section
    print(f"\n| flax_mnist/train.py | failed before step 1: {said} |")

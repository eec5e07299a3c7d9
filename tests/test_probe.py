"""Users' own scripts, unmodified, under the probe (reprokit/kits/probe.py): what it sees comes from the frameworks.

The scripts in tests/user_scripts/ are written as people post them, not by the kit: a PyTorch script with
differences planted in it, the same script fixed, and a twin of the fixed one that takes its batch size,
workers and loop style from the environment and keeps its loops in a helper module. Each runs through the
CLI with the local runner, for real, bounded as the quick profile bounds it; their result files are read
back. The twin must give the fixed script's observations: the probe reads the frameworks, not the text.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import REPO

from reprokit import cli
from reprokit.execute import data_step
from reprokit.results import results

SCRIPTS = Path(__file__).parent / "user_scripts"
pytestmark = pytest.mark.slow


def _probe(tmp_path: Path, data_dir: Path, script: Path, name: str, env: dict | None = None,
           framework: str = "pytorch", cwd: Path = REPO) -> tuple[subprocess.CompletedProcess, dict]:
    state = tmp_path / name
    proc = subprocess.run(
        [sys.executable, "-m", "reprokit", "reproduce", "--script", f"{framework}={script}", "--frameworks", framework,
         "--backend", "local", "--profile", "quick", "--state-dir", str(state), "--data-dir", str(data_dir),
         "--reports-dir", str(tmp_path / "reports"), "--name", name],
        cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})
    (path,) = (state / "results").glob("*.json")
    result = json.loads(path.read_text())
    assert results.problems(result) is None
    return proc, result


# Findings decided by the share of data wait in the quick profile's two timed steps, which load on the host moves.
TIMED = {"input-bound", "loader-in-process"}


def _observed(r: dict) -> dict:
    """What the probe saw of a run, the parts that do not depend on timing."""
    return {"input": r["effective"]["input"], "batch": r["effective"]["batch_size"],
            "steps": r["effective"]["train_steps_per_epoch"], "samples": r["effective"]["train_samples_per_epoch"],
            "eval": (r["effective"]["test_samples"], r["effective"]["eval_batch_sizes"]),
            "phases": [(p["epoch"], p["phase"], p["steps"]) for p in r["memory"]["phases"]],
            "findings": sorted(f["code"] for f in r["findings"] if f["code"] not in TIMED),
            "syncs": r["probe"]["host_syncs"]["per_training_step"], "layers": r["model"]["layers"],
            "parameters": r["model"]["parameters"], "bounded": r["probe"]["bounded"]}


def test_the_planted_script_shows_its_differences_and_the_fixed_one_does_not(kit_python, tmp_path, data_dir):
    kit_python("pytorch")
    _, planted = _probe(tmp_path, data_dir, SCRIPTS / "torch_planted.py", "planted")
    _, fixed = _probe(tmp_path, data_dir, SCRIPTS / "torch_fixed.py", "fixed")
    p, f = _observed(planted), _observed(fixed)
    assert p["batch"]["configured"] == p["batch"]["max"] == 16 and f["batch"]["configured"] == 32
    assert "grad-in-eval" in p["findings"] and "grad-in-eval" not in f["findings"]
    grad = next(x for x in planted["findings"] if x["code"] == "grad-in-eval")
    assert "gradient tracking was on in 19 of 19 forward passes of the model during evaluation" in grad["message"]
    assert p["syncs"] == 1.0 and f["syncs"] == 0                  # loss.item() per step, in the script's own file
    assert "Dropout" in p["layers"] and "Dropout" not in f["layers"]
    # quick bounds: 3 training steps, then evaluation passes of max(3 batches, 300 samples); epoch 2's passes
    # end at once, and the script runs to its end
    assert f["steps"] == p["steps"] == [3] and f["eval"] == (320, [32]) and p["eval"] == (304, [16])
    assert f["phases"] == [(1, "warmup", 1), (1, "train", 2), (1, "eval", 10)]
    assert f["bounded"] == ["epochs", "evaluation", "loader"]
    assert fixed["spec"]["source"] == "script"
    assert fixed["probe"]["ended"] == "the script ran to its end, bounded (epochs, evaluation, loader)"
    assert any("stand-in" in s for s in fixed["probe"]["shims"])
    assert fixed["metrics"]["epochs"][0]["train_loss"] > 0          # the probe's own count of the loss


def test_a_twin_written_otherwise_is_seen_alike(kit_python, tmp_path, data_dir):
    kit_python("pytorch")
    _, fixed = _probe(tmp_path, data_dir, SCRIPTS / "torch_fixed.py", "fixed")
    env = {"REPROKIT_TEST_BATCH": "32", "REPROKIT_TEST_WORKERS": "0", "REPROKIT_TEST_LOOP": "loader"}
    _, twin = _probe(tmp_path, data_dir, SCRIPTS / "torch_twin.py", "twin", env)
    assert _observed(twin) == _observed(fixed)
    # an index loop consumes no loader: the probe stops it after N x E training steps (here before its first
    # evaluation), and says so
    _, index = _probe(tmp_path, data_dir, SCRIPTS / "torch_twin.py", "index", {**env, "REPROKIT_TEST_LOOP": "index"})
    seen = _observed(index)
    assert seen["input"] == "the script's own loop (no loader)" and seen["steps"] == [3]
    assert seen["bounded"] == ["steps"] and seen["phases"] == [(1, "warmup", 1), (1, "train", 2)]
    assert "stopped the script at its bound (steps)" in index["probe"]["ended"]


@pytest.mark.parametrize("script, kind, fragment", [
    ("network.py", "error", "the run has no network: the kit serves MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 "
                            "where their APIs look (`nox -s data -- NAME` stages them); show other data to the script "
                            "with --data (it tried to reach s3.amazonaws.com:443)"),
    ("raises.py", "error", "the script raised ValueError: the script's own bug"),
    ("no_training.py", "invalid-output", "no training step observed"),
])
def test_a_script_that_fails_is_a_failed_run_in_one_sentence(kit_python, tmp_path, data_dir, script, kind, fragment):
    kit_python("pytorch")
    proc, result = _probe(tmp_path, data_dir, SCRIPTS / "faults" / script, "fault")
    assert proc.returncode == 1 and result["status"] == "failed"
    assert result["failure"]["kind"] == kind and fragment in result["failure"]["message"], result["failure"]
    if script == "raises.py":
        assert any("the script's own bug" in line for line in result["failure"]["log_tail"])


@pytest.mark.parametrize("where", ["project", "elsewhere"])
def test_a_project_with_its_own_package_named_kits_runs_its_own(kit_python, tmp_path, data_dir, where):
    """The kit's own packages are reprokit's (reprokit.kits): a project's package named ``kits`` is the project's, and
    its script builds the model it imports from there, whether the command runs in the project's folder or elsewhere.
    With the kits a top-level package of their own, the first imported the project's in place of the kits' (no module
    named 'kits.contract'), and the second's kit process, which had imported its own, did not find the project's (no
    module named 'kits.model')."""
    kit_python("pytorch")
    project = tmp_path / "project"
    shutil.copytree(SCRIPTS / "own_kits", project)
    script, cwd = (Path("train.py"), project) if where == "project" else (project / "train.py", REPO)
    proc, result = _probe(tmp_path, data_dir, script, "own-kits", env={"PYTHONPATH": str(REPO)}, cwd=cwd)
    assert proc.returncode == 0 and result["status"] == "ok", proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "GroupNorm" in result["model"]["layers"]             # the project's SmallNet, from its kits/model.py


def test_a_missing_script_is_refused_before_any_run(tmp_path, capsys):
    code = cli.main(["reproduce", "--script", f"pytorch={tmp_path / 'nope.py'}", "--backend", "local",
                     "--state-dir", str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error: ") == 1 and "nope.py: no such file" in err
    assert not (tmp_path / "state" / "results").exists()


def test_keras_loops_are_seen_whether_eager_traced_or_fit(kit_python, tmp_path, data_dir):
    """The same small Keras model in an eager custom loop, a tf.function loop and model.fit (over arrays, and over
    tfds.load's dataset): the probe sees the same training (batches, steps, phases) in all, and how each ran."""
    kit_python("tensorflow")
    runs = {name: _probe(tmp_path, data_dir, SCRIPTS / f"{name}.py", name, framework="tensorflow")[1]
            for name in ("keras_eager", "keras_graph", "keras_fit", "keras_tfds")}
    seen = {name: _observed(r) for name, r in runs.items()}
    for s in seen.values():
        assert s["batch"]["configured"] == s["batch"]["max"] == 32 and s["steps"] == [3] and s["eval"] == (320, [32])
        assert s["phases"] == [(1, "warmup", 1), (1, "train", 2), (1, "eval", 10)]     # max(3 batches, 300 samples)
    assert runs["keras_eager"]["environment"]["execution"] == "eager"
    assert runs["keras_graph"]["environment"]["execution"] == "tf.function graph"
    assert seen["keras_eager"]["findings"] == ["eager-custom-loop"] and seen["keras_graph"]["findings"] == []
    assert seen["keras_eager"]["syncs"] == 1.0 and seen["keras_graph"]["syncs"] == 0      # float(loss) per step
    assert seen["keras_fit"]["input"] == "Keras fit's own batches of the script's arrays"
    assert seen["keras_fit"]["bounded"] == ["fit"]
    assert runs["keras_fit"]["probe"]["ended"] == "the script ran to its end, bounded (fit)"
    assert "Dense" in seen["keras_graph"]["layers"] and "Dropout" not in seen["keras_graph"]["layers"]
    # tfds.load('cifar10') would download: TFDS reads the stand-in as its own prepared cifar10, declared
    assert seen["keras_tfds"]["input"] == "Keras fit over the script's own tf.data dataset"
    assert any(s.startswith("the generated CIFAR-10 stand-in (") and "as TFDS's prepared cifar10 3.0.2" in s
               for s in runs["keras_tfds"]["probe"]["shims"])


def test_the_probes_count_is_the_frameworks_own(kit_python, tmp_path, data_dir):
    """Keras's own accuracy, as fit prints it, against the probe's count from the loss's inputs."""
    import re

    from reprokit.execute import compose
    tf_python = kit_python("tensorflow")
    args = cli.parse(["--script", f"tensorflow={SCRIPTS / 'keras_fit.py'}", "--frameworks",
                                     "tensorflow", "--backend", "local", "--profile", "quick", "--data-dir",
                                     str(data_dir), "--state-dir", str(tmp_path / "state")])
    (planned,) = compose.build(args).specs
    (tmp_path / "spec.json").write_text(json.dumps(planned.to_dict()))
    proc = subprocess.run([str(tf_python), "-m", "reprokit.kits.probe", "--spec", str(tmp_path / "spec.json"), "--out",
                           str(tmp_path / "out" / "result.json"), "--data-dir", str(data_dir), "--script-dir",
                           str(SCRIPTS)], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    keras_says = re.search(r"- accuracy: ([0-9.]+) .* - val_accuracy: ([0-9.]+)", proc.stdout)
    counted = json.loads((tmp_path / "out" / "result.json").read_text())["metrics"]["epochs"][0]
    # Keras prints 4 decimals of its float32 figure: a count on a half (34 / 320 = 0.10625) prints as 0.1063
    printed = 5e-5 + 1e-6
    assert float(keras_says.group(1)) == pytest.approx(counted["train_accuracy"], abs=printed)
    assert float(keras_says.group(2)) == pytest.approx(counted["test_accuracy"], abs=printed)


def test_a_planted_pair_is_explained_and_its_twin_is_not(kit_python, tmp_path, data_dir):
    """The user's own pair through the whole path (their experiment folder, the local runner, the report): each
    planted difference is named, by the framework that showed it, and the twin's report names none."""
    kit_python("pytorch"), kit_python("tensorflow")
    reports = {}
    for name in ("planted_pair", "twin_pair"):
        proc = subprocess.run(
            [sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(SCRIPTS), "--only", name,
             "--backend", "local", "--profile", "quick", "--state-dir", str(tmp_path / "state"), "--data-dir",
             str(data_dir), "--reports-dir", str(tmp_path / "reports"), "--name", name],
            cwd=REPO, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        reports[name] = (tmp_path / "reports" / name / "report.md").read_text()
    planted, twin = reports["planted_pair"], reports["twin_pair"]
    assert "**scripts-differ** (warning): the models received 16 samples per training step in PyTorch and 32" in planted
    assert "the trained models' layers differ: dropout PyTorch 1, TensorFlow 0" in planted
    assert "PyTorch, `script`: **grad-in-eval**" in planted and "TensorFlow, `script`: **eager-custom-loop**" in planted
    for code in ("scripts-differ", "grad-in-eval", "eager-custom-loop"):
        assert code not in twin
    # a framework default the planted script changes, read back from torch at its end: an undeclared difference
    assert ("`script`: **settings-differ** (warning): deterministic algorithms (determinism.ops): PyTorch on, "
            "TensorFlow off (undeclared: ") in planted
    assert "deterministic algorithms (determinism.ops)" not in twin
    # the certificate on the captured models: the extra dropout is a layer without parameters, and a random one
    assert "**Equivalence certificate: fail**" in planted and "dropout **FAIL**" in planted
    assert "dropout rate 0.3, per element" in planted and "layers\\_without\\_parameters **FAIL**" in planted
    assert "**Equivalence certificate: pass**" in twin and "logits pass" in twin and "loss\\_trajectory info" in twin
    assert "### The scripts, as the probe ran them" in twin and "Declared shims" in twin
    # a report of scripts is re-run with --from (the same specs, planned here) and compared like any other
    again = subprocess.run([sys.executable, "-m", "reprokit", "reproduce", "--from",
                            str(tmp_path / "reports" / "twin_pair"), "--experiments", str(SCRIPTS), "--backend",
                            "local", "--dry-run", "--state-dir",
                            str(tmp_path / "state"), "--data-dir", str(data_dir)],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "2 already finished, 0 to run" in again.stdout, again.stdout + again.stderr
    compared = subprocess.run([sys.executable, "-m", "reprokit", "compare", str(tmp_path / "reports" / "twin_pair"),
                               str(tmp_path / "reports" / "twin_pair")], cwd=REPO, capture_output=True, text=True)
    assert compared.returncode == 0 and "twin\\_pair / script / PyTorch / quick" in compared.stdout, compared.stdout


def test_a_gpu_run_whose_script_trains_on_the_cpu_fails_as_no_gpu(kit_python, tmp_path, data_dir):
    """The spec asks for a GPU; the script's model is on the CPU (none here): refused at its first step."""
    from reprokit.plan import script_plan
    from reprokit.plan.experiments import from_scripts
    from reprokit.plan.plan import Options
    from reprokit.results.provenance import code

    python = kit_python("pytorch")
    opts = Options(profile="quick", device="gpu", repeats=1, frameworks=("pytorch",),
                   data=data_step.Preparing(data_dir, allow_download=False))
    exp = from_scripts("gpu", {"pytorch": SCRIPTS / "torch_fixed.py"})
    (spec,) = script_plan.specs_for(exp.name, exp.scripts, opts, lambda fw: {"lock": None, "lock_sha256": None,
                                                                             "image": None}, code())
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_dict()))
    out = tmp_path / "out" / "result.json"
    proc = subprocess.run([str(python), "-m", "reprokit.kits.probe", "--spec", str(tmp_path / "spec.json"), "--out", str(out),
                           "--data-dir", str(data_dir), "--script-dir", str(SCRIPTS)], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    result = json.loads(out.read_text())
    assert proc.returncode == 1 and result["failure"]["kind"] == "no-gpu"
    assert "the spec asks for a GPU but the script's pytorch model trains on the CPU" in result["failure"]["message"]

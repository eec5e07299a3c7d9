"""Users' own JAX scripts, unmodified, under the probe (reprokit/kits/probe.py, reprokit/kits/jax_kit/probe.py).

Two scripts written as people post them (tests/user_scripts/jax_*.py): a Flax NNX loop with nnx.jit steps
that keeps the last short batch, and a plain jax.jit + optax loop over a parameter dict that donates its
state and drops the short batch. Each runs in the JAX kit's real environment under the probe, once without
bounds, so that what the probe counts can be held against what the script does (its steps, batches, evaluation
and compilations, all computed here from the data's size), and once bounded through the CLI beside a PyTorch
script, as a user's pair.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import REPO

from reprokit import cli
from reprokit.execute import compose
from reprokit.results import results

SCRIPTS = Path(__file__).parent / "user_scripts"
pytestmark = pytest.mark.slow


def _probed(python: Path, tmp_path: Path, data_dir: Path, *scripts: tuple[Path, list[str]]) -> list[tuple[int, str, dict]]:
    """Each script (with its arguments) under the probe in the JAX kit's environment, all at once: the quick
    profile's plan with its bounds lifted, on the first 400 / 100 images (seconds). (exit status, stderr, result)
    of each."""
    started = []
    for script, args in scripts:
        parsed = cli.parse(["--script", f"jax={script}", "--frameworks", "jax", "--backend", "local", "--profile",
                            "quick", "--data-dir", str(data_dir), "--state-dir", str(tmp_path / "state")])
        (planned,) = compose.build(parsed).specs
        spec = planned.to_dict()
        spec["script"]["args"] = list(args)
        spec["bounds"] = {"max_steps": None, "epochs": None, "eval_steps": None}
        spec["data"].update(train_samples=400, test_samples=100)
        folder = tmp_path / script.stem
        folder.mkdir()
        (folder / "spec.json").write_text(json.dumps(spec))
        out = folder / "out" / "result.json"
        started.append((out, subprocess.Popen(
            [str(python), "-m", "reprokit.kits.probe", "--spec", str(folder / "spec.json"), "--out", str(out), "--data-dir",
             str(data_dir), "--script-dir", str(script.parent)], cwd=REPO, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})))
    done = []
    for out, proc in started:
        _, err = proc.communicate(timeout=300)
        result = json.loads(out.read_text())
        assert results.problems(result) is None
        done.append((proc.returncode, err, result))
    return done


def _sizes(samples: int, batch: int, keep_short: bool) -> list[int]:
    """The batches a loop over ``samples`` in steps of ``batch`` makes."""
    full, rest = divmod(samples, batch)
    return [batch] * full + ([rest] if keep_short and rest else [])


@pytest.fixture(scope="module")
def probed(kit_python, tmp_path_factory, data_dir) -> dict[str, tuple[int, str, dict]]:
    """The two scripts run whole, and the optax one with a bug after its first epoch, in one go."""
    tmp = tmp_path_factory.mktemp("jax_scripts")
    posted = tmp / "posted"
    posted.mkdir()
    text = (SCRIPTS / "jax_optax.py").read_text()
    (posted / "raises.py").write_text(text.replace("    acc = np.mean(", "    raise ValueError('a bug after its "
                                                   "first epoch')\n    acc = np.mean(", 1))
    runs = _probed(kit_python("jax"), tmp, data_dir, (SCRIPTS / "jax_nnx.py", ["--epochs", "2"]),
                   (SCRIPTS / "jax_optax.py", []), (posted / "raises.py", []))
    return dict(zip(("nnx", "optax", "raises"), runs))


def test_the_probe_sees_each_jax_scripts_steps_batches_memory_and_compilations(probed):
    (nnx_code, nnx_err, nnx_run), (optax_code, optax_err, optax_run) = probed["nnx"], probed["optax"]
    assert nnx_code == optax_code == 0, nnx_err[-2000:] + optax_err[-2000:]
    train, test = nnx_run["spec"]["data"]["train_samples"], nnx_run["spec"]["data"]["test_samples"]
    for run, batch, keep_short in ((nnx_run, 32, True), (optax_run, 50, False)):
        sizes, eval_sizes = _sizes(train, batch, keep_short), _sizes(test, batch, True)
        eff = run["effective"]
        assert eff["train_steps_per_epoch"] == [len(sizes)] * 2 and run["probe"]["ended"] == "the script ran to its end"
        assert eff["train_samples_per_epoch"] == [sum(sizes)] * 2
        assert (eff["batch_size"]["max"], eff["batch_size"]["min"]) == (batch, min(sizes))
        assert eff["test_samples"] == test and eff["eval_batch_sizes"] == list(dict.fromkeys(eval_sizes))
        assert [(p["epoch"], p["phase"], p["steps"]) for p in run["memory"]["phases"]] == [
            (1, "warmup", 1), (1, "train", len(sizes) - 1), (1, "eval", len(eval_sizes)),
            (2, "train", len(sizes)), (2, "eval", len(eval_sizes))]
        assert all(p["peak_bytes"] > 0 for p in run["memory"]["phases"])     # the process's high-water marks
        # the probe's own time over the measured steps is part of its whole run's, the device's waits left out
        measured = 2 * len(sizes) - 1
        assert 0 <= run["probe"]["own_seconds_per_step"] * measured <= run["probe"]["own_seconds"] + 1e-6
        assert run["environment"]["framework"] == "jax" and run["environment"]["device"] == "cpu"
        # every new input shape compiled once, the training step's first in the warmup step
        compiled = run["probe"]["compilations"]
        assert [(c["kind"], c["call"]) for c in compiled if c["kind"] == "train step"] == \
            [("train step", 1)] + ([("train step", len(sizes))] if len(set(sizes)) > 1 else [])
        assert compiled[0]["phase"] == "warmup" and compiled[0]["seconds"] > 0
        assert [c["call"] for c in compiled if c["kind"] == "evaluation"] == \
            [1] + ([len(eval_sizes)] if len(set(eval_sizes)) > 1 else [])
    # the same network in both: Flax's modules, and the parameters optax's update stepped
    conv1, conv2, dense = 3 * 3 * 3 * 16 + 16, 3 * 3 * 16 * 32 + 32, 32 * 10 + 10
    assert nnx_run["model"] == {"parameters": {"total": conv1 + conv2 + dense, "trainable": conv1 + conv2 + dense},
                                "layers": ["Conv", "Conv", "Linear"]}
    assert optax_run["model"]["parameters"]["total"] == conv1 + conv2 + dense and optax_run["model"]["layers"] == []
    assert nnx_run["probe"]["models"] == [f"CNN with {conv1 + conv2 + dense:,} parameters"]
    # the short batch's new shape compiled again inside the measured steps: said
    steps = len(_sizes(train, 32, True))
    assert any(f"train_step compiled again at training step {steps} (a new input shape)" in n
               for n in nnx_run["probe"]["notes"])
    assert not optax_run["probe"]["notes"]


def test_a_jax_script_that_raises_is_a_failed_run_with_its_reason(probed):
    code, _, result = probed["raises"]
    assert code == 1 and result["status"] == "failed" and result["failure"]["kind"] == "error"
    assert result["failure"]["message"] == "the script raised ValueError: a bug after its first epoch"
    assert any("a bug after its first epoch" in line for line in result["failure"]["log_tail"])


def test_a_pytorch_and_jax_pair_runs_end_to_end(kit_python, tmp_path, data_dir):
    """The user's pair through the CLI (quick bounds, local runner): both measured, the report renders, and the
    certificate, on the nnx.Module the JAX script trains and the PyTorch model, captured at their first steps,
    certifies them as the same model (docs/scripts.md)."""
    kit_python("pytorch"), kit_python("jax")
    proc = subprocess.run(
        [sys.executable, "-m", "reprokit", "reproduce", "--script", f"pytorch={SCRIPTS / 'torch_fixed.py'}",
         "--script", f"jax={SCRIPTS / 'jax_nnx.py'}", "--backend", "local", "--profile", "quick", "--state-dir",
         str(tmp_path / "state"), "--data-dir", str(data_dir), "--reports-dir", str(tmp_path / "reports"),
         "--name", "jax_pair"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = {r["framework"]: r for r in (json.loads(p.read_text()) for p in (tmp_path / "state" / "results").glob("*.json"))
            if r.get("spec", {}).get("source") == "script"}
    assert {fw: r["status"] for fw, r in runs.items()} == {"pytorch": "ok", "jax": "ok"}
    jax_run = runs["jax"]
    assert jax_run["effective"]["train_steps_per_epoch"] == runs["pytorch"]["effective"]["train_steps_per_epoch"] == [3]
    assert jax_run["effective"]["batch_size"]["configured"] == 32 and jax_run["probe"]["bounded"] == ["steps"]
    report = (tmp_path / "reports" / "jax_pair" / "report.md").read_text()
    assert "JAX" in report and "**Equivalence certificate: pass**" in report
    assert "- layers pass: 5,418 parameters" in report and "- logits pass:" in report and "- dropout pass:" in report

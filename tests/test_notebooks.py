"""A notebook given as a script (reprokit/environments/notebooks.py): its code cells run in order as one script, declared.

One end-to-end run of the corpus notebook (tests/corpus/notebooks/) through the reproduce command on the quick
profile, with the real TensorFlow kit; the rest are plan-time refusals, which start no run.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from reprokit import cli
from reprokit.environments import notebooks, script_requirements
from reprokit.results import results
from reprokit.results.provenance import REPO

NOTEBOOK = REPO / "tests" / "corpus" / "notebooks" / "mnist_convnet.ipynb"


def _write(folder: Path, *cells: tuple[str, str]) -> Path:
    """A notebook of (kind, source) cells, as Jupyter saves one."""
    folder.mkdir(exist_ok=True)
    nb = {"cells": [{"cell_type": kind, "id": f"c{i}", "metadata": {}, "source": text,
                     **({"execution_count": None, "outputs": []} if kind == "code" else {})}
                    for i, (kind, text) in enumerate(cells)],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = folder / "tutorial.ipynb"
    path.write_text(json.dumps(nb))
    return path


def _plan(tmp_path: Path, notebook: Path, capsys) -> str:
    """The reproduce command's error for a notebook that is refused: exit status 2, one error, no run started."""
    code = cli.main(["reproduce", "--script", f"tensorflow={notebook}", "--frameworks", "tensorflow", "--backend",
                     "local", "--profile", "quick", "--state-dir", str(tmp_path / "state"), "--data-dir",
                     str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error: ") == 1, err
    assert not (tmp_path / "state" / "results").exists()
    return err


@pytest.mark.slow
def test_a_tutorial_notebook_runs_as_one_script_declared(kit_python, tmp_path, data_dir):
    kit_python("tensorflow")
    state = tmp_path / "state"
    code = cli.main(["reproduce", "--script", f"tensorflow={NOTEBOOK}", "--frameworks", "tensorflow", "--backend",
                     "local", "--profile", "quick", "--state-dir", str(state), "--data-dir", str(data_dir),
                     "--reports-dir", str(tmp_path / "reports"), "--name", "notebook"])
    (r,) = [json.loads(p.read_text()) for p in (state / "results").glob("*.json")]
    assert code == 0 and r["status"] == "ok" and results.problems(r) is None, r.get("failure")
    assert sum(r["effective"]["train_steps_per_epoch"]) == 3 and r["spec"]["data"]["dataset"] == "learnable-mnist"
    # the declaration: the notebook's sha256 and the converted text's, in the spec and the probe's shims
    said = r["spec"]["script"]["notebook"]
    assert said["sha256"] == hashlib.sha256(NOTEBOOK.read_bytes()).hexdigest()
    assert said["code_sha256"] == hashlib.sha256(said["code"].encode()).hexdigest()
    assert "%matplotlib" not in said["code"] and "model.fit(x_train" in said["code"]
    shims = r["probe"]["shims"]
    assert f"the notebook mnist_convnet.ipynb (sha256 {said['sha256']}) runs as one script of its code cells in " \
           f"order, converted on the host by jupytext (sha256 {said['code_sha256']}), in its own folder" in shims
    assert ("mnist_convnet.ipynb, cell 2 (counting every cell from 1), line 1: %matplotlib inline left out (plots "
            "draw off screen under the probe)") in shims
    # the plot it saved beside itself: kept as a figure, and written in the run's copy of the folder, not the user's
    assert [f["name"] for f in r["probe"]["figures"]] == ["accuracy.png"]
    assert not (NOTEBOOK.parent / "accuracy.png").exists()


def test_pip_install_is_refused_naming_its_cell_and_require(tmp_path, capsys):
    notebook = _write(tmp_path / "nb", ("markdown", "# Setup"), ("code", "!pip install -q tensorflow-datasets seaborn"),
                      ("code", "import tensorflow as tf"))
    assert _plan(tmp_path, notebook, capsys) == (
        "error: tutorial.ipynb, cell 2 (counting every cell from 1), line 1: !pip install -q tensorflow-datasets "
        "seaborn installs packages, which a run never does; give them with --require tensorflow=seaborn (or in a "
        "requirements.txt beside the notebook), and the run leaves this line out\n")
    # that way out works: with seaborn required (tensorflow-datasets is the lock's), the line is left out, declared
    assert notebooks.for_spec(notebooks.convert(notebook), "tensorflow", ("seaborn",),
                              script_requirements.locked("tensorflow"))["left_out"] == [
        "tutorial.ipynb, cell 2 (counting every cell from 1), line 1: !pip install -q tensorflow-datasets seaborn "
        "left out (tensorflow-datasets, seaborn: from the script's requirements or the tensorflow lock)"]


@pytest.mark.parametrize("line", ["%load_ext tensorboard", "files = !ls ./data"])
def test_another_magic_or_shell_line_is_refused_naming_its_cell(tmp_path, capsys, line):
    notebook = _write(tmp_path / "nb", ("code", "import tensorflow as tf"), ("markdown", "## Logs"),
                      ("code", f"x = 1\n{line}"))
    assert _plan(tmp_path, notebook, capsys) == (
        f"error: tutorial.ipynb, cell 3 (counting every cell from 1), line 2: {line} is IPython's, not Python, and "
        f"has no meaning in a script run; give a notebook without it (or its work done in Python), or a .py script\n")


def test_a_notebook_that_is_not_json_is_refused_in_one_sentence(tmp_path, capsys):
    notebook = tmp_path / "nb" / "tutorial.ipynb"
    notebook.parent.mkdir()
    notebook.write_text('{"cells": [')
    assert _plan(tmp_path, notebook, capsys) == (
        "error: tutorial.ipynb is not a notebook: it is not valid JSON (Expecting value: line 1 column 12 (char 11)); "
        "save it again from Jupyter, or give a .py script\n")


def test_a_percent_inside_a_string_or_an_expression_is_python(tmp_path):
    """Only IPython's lines are taken out: a line of a multi-line string, or an expression's continuation, stays."""
    code = 'text = """\n%d items\n!done\n"""\ntotal = (7\n         % 4)\n%matplotlib inline'
    converted = notebooks.convert(_write(tmp_path / "nb", ("code", code)))
    assert converted["code"] == "# %%\n" + code.rsplit("\n", 1)[0] + "\n"
    assert converted["left_out"] == ["tutorial.ipynb, cell 1 (counting every cell from 1), line 7: %matplotlib "
                                     "inline left out (plots draw off screen under the probe)"]

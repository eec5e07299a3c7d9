"""A notebook given as a script (reprokit/environments/notebooks.py): its code cells run in order, each as Jupyter
runs it, its IPython lines settled before any run, every one declared.

Two end-to-end runs through the reproduce command on the quick profile, with the real TensorFlow kit: the
Keras tutorial notebook (tests/corpus/notebooks/), and the lessons notebook (tests/corpus/notebook_lessons/),
which raises an error on purpose, sets its environment with %env and has lines that only show something. The
rest are fast: the plan-time rules and refusals, and the kit's cell runner (reprokit/kits/training_loop/notebook_script.py)
on notebooks of plain Python, run in their own folder as the probe runs them.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from checkout import REPO
from test_corpus import row

from reprokit import cli
from reprokit.environments import notebooks, script_requirements
from reprokit.errors import UserError
from reprokit.kits.contract.spec import Notebook, SpecError, parse
from reprokit.kits.training_loop import notebook_script
from reprokit.results import results, spec_types

NOTEBOOK = REPO / "tests" / "corpus" / "notebooks" / "mnist_convnet.ipynb"
LESSONS = REPO / "tests" / "corpus" / "notebook_lessons" / "mnist_callbacks.ipynb"
TAGGED = {"metadata": {"tags": ["raises-exception"]}}
WHERE = "tutorial.ipynb, cell {} (counting every cell from 1)"


def _saved(ename: str, evalue: str) -> dict:
    """A code cell's saved error output, as Jupyter saves it."""
    return {"outputs": [{"output_type": "error", "ename": ename, "evalue": evalue,
                         "traceback": ["-" * 75, f"{ename:<42}Traceback (most recent call last)", "Cell In[3], "
                                       "line 1\n----> 1 ...\n", f"{ename}: {evalue}"]}]}


def _write(folder: Path, *cells: tuple) -> Path:
    """A notebook of (kind, source[, fields]) cells, as Jupyter saves one: fields (outputs, metadata) where given."""
    folder.mkdir(exist_ok=True)
    nb = {"cells": [{"cell_type": kind, "id": f"c{i}", "metadata": {}, "source": text,
                     **({"execution_count": None, "outputs": []} if kind == "code" else {}), **(rest[0] if rest else {})}
                    for i, (kind, text, *rest) in enumerate(cells)],
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


def _run_cells(notebook: Path, monkeypatch) -> list[str]:
    """The notebook's cells run as the probe runs them, in the notebook's folder: what the run declared."""
    settled = parse(Notebook, notebooks.for_spec(notebooks.convert(notebook), "tensorflow", (), ()), "notebook")
    script = notebook.parent.with_name("converted.py")
    script.write_text(settled.code)
    monkeypatch.chdir(notebook.parent)
    declared: list[str] = []
    notebook_script.run_cells(settled, notebook.name, script, {}, declared)
    return declared


@pytest.mark.slow
def test_a_tutorial_notebook_runs_its_cells_declared(kit_python, tmp_path, data_dir):
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
    assert "\npass  # %matplotlib inline\n" in said["code"] and "model.fit(x_train" in said["code"]
    shims = r["probe"]["shims"]
    assert f"the notebook mnist_convnet.ipynb (sha256 {said['sha256']}) runs as each of its code cells in order, " \
           f"as Jupyter runs them, converted on the host by jupytext (sha256 {said['code_sha256']}), in its own " \
           f"folder" in shims
    assert ("mnist_convnet.ipynb, cell 2 (counting every cell from 1), line 1: %matplotlib inline left out (plots "
            "draw off screen under the probe)") in shims
    # the plot it saved beside itself: kept as a figure, and written in the run's copy of the folder, not the user's
    assert [f["name"] for f in r["probe"]["figures"]] == ["accuracy.png"]
    assert not (NOTEBOOK.parent / "accuracy.png").exists()


@pytest.mark.slow
def test_the_lessons_notebook_raises_on_purpose_sets_its_environment_and_trains(kit_python, tmp_path, data_dir):
    kit_python("tensorflow")
    state = tmp_path / "state"
    code = cli.main(["reproduce", "--script", f"tensorflow={LESSONS}", "--frameworks", "tensorflow", "--backend",
                     "local", "--profile", "quick", "--state-dir", str(state), "--data-dir", str(data_dir),
                     "--reports-dir", str(tmp_path / "reports"), "--name", "lessons"])
    (r,) = [json.loads(p.read_text()) for p in (state / "results").glob("*.json")]
    assert code == 0 and r["status"] == "ok" and results.problems(r) is None, r.get("failure")
    print("\n" + row(r, "not run (one script)"))
    e = r["effective"]
    assert sum(e["train_steps_per_epoch"]) == 3 and e["batch_size"]["min"] == e["batch_size"]["max"] == 64
    assert any(p["phase"] == "eval" and p["steps"] for p in r["memory"]["phases"]) and e["test_samples"] >= 300
    assert "the script ran to its end" in r["probe"]["ended"], r["probe"]["ended"]
    shims, at = r["probe"]["shims"], "mnist_callbacks.ipynb, cell {} (counting every cell from 1)"
    # the cell that raises on purpose: its saved TypeError, declared, and the cells after it ran (it trained)
    assert (f"{at.format(9)} raised TypeError: 'Dense' object is not iterable, as its saved output shows TypeError: "
            f"'Dense' object is not iterable; the run went on with the next cell, as Jupyter does") in shims
    # the lines that only show something, left out; %env honoured (the next cell reads KERAS_BACKEND), %time run
    for declared in (f"{at.format(2)}, line 1: %load_ext tensorboard left out (it loads TensorBoard's view inside "
                     f"the notebook, which a run has no screen for)",
                     f"{at.format(16)}, line 1: !ls {{checkpoint_dir}} left out (it only lists files)",
                     f"{at.format(21)}, line 1: %tensorboard --logdir=logs left out (it shows TensorBoard inside the "
                     f"notebook, which a run has no screen for)",
                     f"{at.format(4)}, line 1: %env KERAS_BACKEND=tensorflow sets KERAS_BACKEND=tensorflow in the "
                     f"run's environment, at that line",
                     f"{at.format(14)}, line 1: %%time runs the cell, untimed (the probe times the run)",
                     f"{at.format(19)}, line 1: %timeit -n 10 model.predict(x_test[:64], verbose=0) runs its "
                     f"statement once, untimed (the probe times the run)"):
        assert declared in shims, (declared, shims)
    assert not (LESSONS.parent / "training_checkpoints").exists()       # written in the run's copy


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


@pytest.mark.parametrize("line", ["%load_ext autoreload", "files = !ls ./data", "!cat log.txt > copy.txt",
                                  "%%time", "%who"])
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
    """Only IPython's lines are settled: a line of a multi-line string, or an expression's continuation, stays."""
    code = 'text = """\n%d items\n!done\n"""\ntotal = (7\n         % 4)\n%matplotlib inline'
    converted = notebooks.convert(_write(tmp_path / "nb", ("code", code)))
    assert converted["code"] == "# %%\n" + code.replace("%matplotlib inline", "pass  # %matplotlib inline") + "\n"
    assert converted["left_out"] == ["tutorial.ipynb, cell 1 (counting every cell from 1), line 7: %matplotlib "
                                     "inline left out (plots draw off screen under the probe)"]


def test_each_code_cells_lines_are_found_in_the_converted_text(tmp_path):
    """What the probe compiles for each cell is that cell, even where a cell's own line reads like a cell marker."""
    sources = ["x = 1\n\n\n", "# %%\ny = 2", "", "# %% [markdown]\n\nz = 3\n", "def f():\n    return 1"]
    converted = notebooks.convert(_write(tmp_path / "nb", ("markdown", "# %%\ntitle"),
                                         *(("code", source) for source in sources)))
    lines = converted["code"].splitlines()
    assert [(c["number"], lines[c["first_line"] - 1:c["last_line"]]) for c in converted["cells"]] == [
        (n, source.splitlines()) for n, source in enumerate(sources, 2) if source]


@pytest.mark.parametrize("key", sorted(notebooks.SHOWS_ONLY))
def test_each_line_that_only_shows_is_left_out_declared_and_its_block_stays_a_block(tmp_path, key):
    converted = notebooks.convert(_write(tmp_path / "nb", ("code", f"for name in ['a']:\n    {key}\nx = 1")))
    assert converted["code"] == f"# %%\nfor name in ['a']:\n    pass  # {key}\nx = 1\n"
    compile(converted["code"], "converted.py", "exec")
    assert converted["left_out"] == [f"{WHERE.format(1)}, line 2: {key} left out ({notebooks.SHOWS_ONLY[key]})"]


def test_time_and_timeit_run_their_statement_and_env_and_cd_are_honoured_in_order(tmp_path, monkeypatch):
    folder = tmp_path / "copy"
    (folder / "data").mkdir(parents=True)
    monkeypatch.setenv("MODE", "unset")         # restored after the test, whatever the notebook sets
    monkeypatch.setenv("SEED", "unset")
    notebook = _write(folder, ("code", "%%time\nx = 1 + 1"), ("code", "%time y = x * 3"),
                      ("code", "%timeit -n 10 -r 2 z = y + 1"), ("code", "%%timeit -n 5 w = 0\nw += 1"),
                      ("code", "%env MODE=lesson\n%env SEED 7\n%env"), ("code", "%cd data"),
                      ("code", "import json, os\nwith open('seen.json', 'w') as f:\n"
                               "    json.dump([x, y, z, w, os.environ['MODE'], os.environ['SEED']], f)"),
                      ("code", "%cd -q ..\n!pwd"))
    converted = notebooks.convert(notebook)
    assert converted["honoured"] == [
        f"{WHERE.format(1)}, line 1: %%time runs the cell, untimed (the probe times the run)",
        f"{WHERE.format(2)}, line 1: %time y = x * 3 runs its statement, untimed (the probe times the run)",
        f"{WHERE.format(3)}, line 1: %timeit -n 10 -r 2 z = y + 1 runs its statement once, untimed (the probe times "
        f"the run)",
        f"{WHERE.format(4)}, line 1: %%timeit -n 5 w = 0 runs the cell once, untimed (the probe times the run)",
        f"{WHERE.format(5)}, line 1: %env MODE=lesson sets MODE=lesson in the run's environment, at that line",
        f"{WHERE.format(5)}, line 2: %env SEED 7 sets SEED=7 in the run's environment, at that line",
        f"{WHERE.format(6)}, line 1: %cd data changes the working folder to ./data of the run's copy of the "
        f"notebook's folder, at that line",
        f"{WHERE.format(8)}, line 1: %cd -q .. changes the working folder to . of the run's copy of the notebook's "
        f"folder, at that line"]
    assert converted["left_out"] == [f"{WHERE.format(5)}, line 3: %env left out (it only shows the environment)",
                                     f"{WHERE.format(8)}, line 2: !pwd left out (it only shows the working folder)"]
    assert _run_cells(notebook, monkeypatch) == []
    assert json.loads((folder / "data" / "seen.json").read_text()) == [2, 6, 7, 1, "lesson", "7"]
    assert Path.cwd() == folder and os.environ["MODE"] == "lesson"


def test_a_cells_future_import_holds_for_the_cells_after_it(tmp_path, monkeypatch):
    notebook = _write(tmp_path / "nb", ("code", "from __future__ import annotations"),
                      ("code", "def scale(x: Tensor) -> Tensor:\n    return x"), ("code", "print(scale(2))"))
    assert _run_cells(notebook, monkeypatch) == []       # without it, Tensor (never defined) raises NameError


@pytest.mark.parametrize("line", ["%cd ../..", "%cd /tmp", "%cd", "%cd ~/data", "%cd -"])
def test_a_cd_out_of_the_runs_copy_is_refused(tmp_path, line):
    notebook = _write(tmp_path / "nb", ("code", "%cd data"), ("markdown", "## Up"), ("code", f"x = 1\n{line}"))
    with pytest.raises(UserError) as refused:
        notebooks.convert(notebook)
    assert str(refused.value) == (
        f"{WHERE.format(3)}, line 2: {line} leaves the run's copy of the notebook's folder, the only folder a run has; "
        f"move the notebook into the folder it works in, or show the run its data where the notebook reads it with "
        f"--data WHERE=FOLDER")


def test_a_cd_out_of_the_copy_is_refused_before_any_run(tmp_path, capsys):
    notebook = _write(tmp_path / "nb", ("code", "import tensorflow as tf"), ("code", "%cd .."))
    assert _plan(tmp_path, notebook, capsys) == (
        f"error: {WHERE.format(2)}, line 1: %cd .. leaves the run's copy of the notebook's folder, the only folder a "
        f"run has; move the notebook into the folder it works in, or show the run its data where the notebook reads "
        f"it with --data WHERE=FOLDER\n")


def test_a_value_from_python_in_env_is_refused(tmp_path):
    with pytest.raises(UserError) as refused:
        notebooks.convert(_write(tmp_path / "nb", ("code", "%env DATA=$HOME/data")))
    assert str(refused.value) == (
        f"{WHERE.format(1)}, line 1: %env DATA=$HOME/data takes a value from Python ($name or {{expression}}), which "
        f"is known only as the notebook runs; write the value out, or do it in Python (os.environ, os.chdir)")


def test_a_cell_that_raises_on_purpose_is_declared_and_the_next_cell_runs(tmp_path, monkeypatch):
    notebook = _write(tmp_path / "nb", ("markdown", "# Mistakes"),
                      ("code", "# This is an error!\nlen(5)\nskipped = True",
                       _saved("TypeError", "object of type 'int' has no len()")),
                      ("code", "int('seven')", TAGGED),
                      ("code", "fine = 1", _saved("KeyError", "'fine'")),
                      ("code", "with open('went_on.txt', 'w') as f:\n    f.write(str('skipped' in globals()))"))
    assert [(c["number"], c["error"], c["error_value"], c["tagged"]) for c in notebooks.convert(notebook)["cells"]] \
        == [(2, "TypeError", "object of type 'int' has no len()", False), (3, None, None, True),
            (4, "KeyError", "'fine'", False), (5, None, None, False)]
    assert _run_cells(notebook, monkeypatch) == [
        f"{WHERE.format(2)} raised TypeError: object of type 'int' has no len(), as its saved output shows TypeError: "
        f"object of type 'int' has no len(); the run went on with the next cell, as Jupyter does",
        f"{WHERE.format(3)} raised ValueError: invalid literal for int() with base 10: 'seven', as its "
        f"raises-exception tag allows (any error, as nbclient reads the tag); the run went on with the next cell, as "
        f"Jupyter does",
        f"{WHERE.format(4)} raised no error, where its saved output shows KeyError: 'fine'; the run went on"]
    assert (notebook.parent / "went_on.txt").read_text() == "False"     # the rest of the raising cell did not run


def test_the_probes_own_error_in_a_tagged_cell_is_not_the_cells(tmp_path, monkeypatch):
    """An error raised in the kit's code (here its spec reader) goes through a tagged cell, to the probe; the
    cell's own error does not."""
    notebook = _write(tmp_path / "nb", ("code", "raise ValueError('raised by the cell')", TAGGED),
                      ("code", "from reprokit.kits.contract.spec import ScriptSpec\nScriptSpec.from_dict({})", TAGGED))
    with pytest.raises(SpecError, match="^spec.schema is missing$"):
        _run_cells(notebook, monkeypatch)


def test_a_notebook_planned_before_cells_ran_one_at_a_time_still_reads(tmp_path):
    """A result's spec from before: its notebook has no honoured lines and no cells, and its text runs as one script."""
    older = {k: v for k, v in notebooks.for_spec(notebooks.convert(_write(tmp_path / "nb", ("code", "x = 1"))),
                                                 "tensorflow", (), ()).items() if k not in ("honoured", "cells")}
    assert spec_types.spec_problem(Notebook, older) is None
    assert parse(Notebook, older, "notebook") == Notebook(**older, honoured=[], cells=[])


@pytest.mark.parametrize("fields", [_saved("TypeError", "must be real number, not str"),
                                    _saved("TypeError", "must be real number, not str") | TAGGED])
def test_a_cell_raising_another_error_than_its_saved_one_fails_naming_the_cell_and_both(tmp_path, monkeypatch,
                                                                                         fields):
    notebook = _write(tmp_path / "nb", ("code", "import math"), ("markdown", "A square root needs a number:"),
                      ("code", "# This is an error!\nmath.sqrt(-1)", fields), ("code", "reached = True"))
    with pytest.raises(notebook_script.NotTheSavedError) as failed:
        _run_cells(notebook, monkeypatch)
    assert str(failed.value) == (
        f"{WHERE.format(3)} raised ValueError: math domain error, not the TypeError its saved output shows "
        f"(TypeError: must be real number, not str), so the notebook runs otherwise here than when it was saved; run "
        f"it in Jupyter and save it again, or fix the cell")
    assert isinstance(failed.value.__cause__, ValueError)

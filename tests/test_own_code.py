"""A script's own code is its own (reprokit/environments/own_code.py), and a missing module gets the flag that adds it
(reprokit/environments/module_names.py).

A script inside a package that imports that package runs as its module from the package's root, as its README runs
it (`python -m examples.mnist_classifier`); `--script "FRAMEWORK=-m MODULE"` and an experiment file's `module =`
say so directly. No sentence ever tells a user to install a package of the index under the name of their own
module: a script outside any package that imports a sibling folder's package is told the `-m` form that would work,
and a requirement whose wheel would install a module under the name of the script's own is refused before any run,
here against a local folder of wheels (PIP_FIND_LINKS, PIP_NO_INDEX), never the live index. Module names map to
distributions through the kit's own environments, and where they cannot know, a table kept here and checked against
the environments that hold its packages. Suggested flags name each package once, in the user's order.
"""
from __future__ import annotations

import json
import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest

from reprokit import cli
from reprokit.environments import module_names, own_code
from reprokit.errors import UserError
from reprokit.kits.contract import work_folder
from reprokit.plan import request
from reprokit.plan.experiments import from_scripts, load

NOTHING_INSTALLED = frozenset().__contains__            # no module of the root is the environment's
CLASSIFIER = "import numpy as np\nfrom examples import datasets\n\nprint(datasets.NAME, np.pi)\n"


def _repository(tmp_path: Path, marker: str = ".git") -> Path:
    """A clone's root (its .git), with an examples package whose classifier imports the package by name."""
    repo = tmp_path / "repo"
    (repo / "examples").mkdir(parents=True)
    (repo / marker).mkdir() if marker == ".git" else (repo / marker).write_text("")
    (repo / "examples" / "__init__.py").write_text("")
    (repo / "examples" / "datasets.py").write_text("NAME = 'mnist'\n")
    (repo / "examples" / "mnist_classifier.py").write_text(CLASSIFIER)
    return repo


def test_the_root_is_where_the_package_hangs_from(tmp_path):
    repo = _repository(tmp_path)
    script = repo / "examples" / "mnist_classifier.py"
    assert own_code.root_of(script) == repo
    assert own_code.run_as_module(script, NOTHING_INSTALLED) == (repo, "examples.mnist_classifier")
    # nested packages: up to the first folder without __init__.py
    (repo / "examples" / "vision").mkdir()
    (repo / "examples" / "vision" / "__init__.py").write_text("")
    (repo / "examples" / "vision" / "train.py").write_text("from ..datasets import NAME\n")    # relative: -m only
    assert own_code.run_as_module(repo / "examples" / "vision" / "train.py", NOTHING_INSTALLED) == (
        repo, "examples.vision.train")
    # a package folder that is itself a project's root (setup.py) is where the walk stops
    (repo / "examples" / "vision" / "setup.py").write_text("")
    assert own_code.root_of(repo / "examples" / "vision" / "train.py") == repo / "examples" / "vision"
    # a script in a package that imports only what lies beside it runs as `python SCRIPT`, as before
    (repo / "examples" / "plain.py").write_text("import datasets\n")
    assert own_code.run_as_module(repo / "examples" / "plain.py", NOTHING_INSTALLED) is None
    # a script in no package is its own root
    (tmp_path / "alone.py").write_text("import numpy\n")
    assert own_code.root_of(tmp_path / "alone.py") == tmp_path


def test_a_script_that_imports_its_own_package_runs_as_its_module_from_its_root(tmp_path, monkeypatch):
    repo = _repository(tmp_path)
    by_path = from_scripts("pkg", {"jax": (repo / "examples" / "mnist_classifier.py", ["--epochs", "1"])}).scripts
    monkeypatch.chdir(repo)
    given = cli.parse(["--script", "jax=-m examples.mnist_classifier --epochs 1"]).what.scripts
    assert given == {"jax": request.ScriptCommand(None, ("--epochs", "1"), "examples.mnist_classifier", repo)}
    by_module = from_scripts("pkg", given).scripts
    for entry in (by_path["jax"], by_module["jax"]):          # the same run, whichever way it is given
        assert (entry["folder"], entry["path"], entry["module"], entry["args"]) == (
            repo, "examples/mnist_classifier.py", "examples.mnist_classifier", ["--epochs", "1"])
    # an experiment file: module instead of path, folder its root
    (tmp_path / "pkg.toml").write_text('[experiment]\nname = "pkg"\ntitle = "t"\nframeworks = ["jax"]\n\n[scripts]\n'
                                       'jax = { module = "examples.mnist_classifier", folder = "repo" }\n')
    entry = load(tmp_path / "pkg.toml").scripts["jax"]
    assert (entry["folder"], entry["path"], entry["module"]) == (repo, "examples/mnist_classifier.py",
                                                                 "examples.mnist_classifier")


@pytest.mark.parametrize("script, says", [
    ("jax=-m", "--script 'jax=-m' names no module after -m; use --script \"FRAMEWORK=-m MODULE [ARGS]\", as python "
               "-m MODULE runs it from the current folder"),
    ("jax=-m examples.missing", "--script jax=-m examples.missing: python -m examples.missing finds neither "
                                "examples/missing.py nor examples/missing/__main__.py in the current folder {repo}; "
                                "run the command from the folder that holds the package"),
])
def test_a_module_that_is_not_there_is_one_sentence(tmp_path, monkeypatch, capsys, script, says):
    repo = _repository(tmp_path)
    monkeypatch.chdir(repo)
    assert cli.main(["reproduce", "--script", script, "--backend", "local", "--state-dir", str(tmp_path / "s"),
                     "--data-dir", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err == f"error: {says.format(repo=repo)}\n"
    assert not (tmp_path / "s").exists()


def test_an_experiment_entry_whose_folder_is_not_the_packages_root_says_which_is(tmp_path):
    repo = _repository(tmp_path)
    (repo / "examples" / "pkg.toml").write_text('[experiment]\nname = "pkg"\ntitle = "t"\nframeworks = ["jax"]\n\n'
                                                '[scripts]\njax = "mnist_classifier.py"\n')
    with pytest.raises(UserError) as refused:
        load(repo / "examples" / "pkg.toml")
    assert str(refused.value) == (f"{repo / 'examples' / 'pkg.toml'}: scripts: mnist_classifier.py imports its own "
                                  f"package, so it runs as python -m examples.mnist_classifier from {repo}: give "
                                  f"module = \"examples.mnist_classifier\" and folder = \"..\"")


def test_a_script_beside_a_package_it_imports_is_told_the_m_form_never_a_package_to_install(kit_python, tmp_path,
                                                                                             capsys):
    kit_python("jax")
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    (project / "mylib").mkdir()
    (project / "mylib" / "__init__.py").write_text("WIDTH = 8\n")
    (project / "scripts" / "train.py").write_text("import jax\nfrom mylib import WIDTH\n")
    assert cli.main(["reproduce", "--script", f"jax={project / 'scripts' / 'train.py'}", "--frameworks", "jax",
                     "--backend", "local", "--state-dir", str(tmp_path / "s"), "--data-dir", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err == (
        f"error: train.py imports mylib, a package of the script's own tree ({project / 'mylib'}) that `python "
        f"train.py` does not put on the path: run it as its module from {project}: --script \"jax=-m scripts.train\" "
        f"there, or module = \"scripts.train\" with folder = \"{project}\" in [scripts]\n")
    assert not (tmp_path / "s" / "results").exists()


def _wheel(folder: Path, name: str, version: str = "1.0") -> Path:
    """A pure-Python wheel of a package of one module, ``name``, as the index would serve a stranger's."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "print('not your package')\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             f"{info}/top_level.txt": f"{name}\n"}
    record = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for member, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(zipfile.ZipInfo(member, (2026, 1, 1, 0, 0, 0)), text)
    return path


@pytest.mark.parametrize("given", ["--require", "requirements.txt"])
def test_a_requirement_that_would_install_a_module_under_the_scripts_own_name_is_refused(kit_python, tmp_path,
                                                                                        monkeypatch, capsys, given):
    """The dependency confusion of JAX's MNIST example: `examples` exists on the index too. Here a local folder of
    wheels holds one under that name; the kit reads what it would install and refuses it before any run."""
    kit_python("jax")
    repo = _repository(tmp_path)
    wheel = _wheel(tmp_path / "index", "examples")
    cache = tmp_path / "cache"              # the resolved set is the local wheel's: kept out of the user's cache
    for var, value in (("REPROKIT_CACHE", cache), ("PIP_FIND_LINKS", wheel.parent), ("PIP_NO_INDEX", "1")):
        monkeypatch.setenv(var, str(value))
    if given == "--require":
        extra, where = ["--require", "jax=examples"], "--require jax"
    else:
        (repo / "examples" / "requirements.txt").write_text("examples\n")
        extra, where = [], str(repo / "examples" / "requirements.txt")
    code = cli.main(["reproduce", "--script", f"jax={repo / 'examples' / 'mnist_classifier.py'}", *extra,
                     "--frameworks", "jax", "--backend", "local", "--state-dir", str(tmp_path / "s"),
                     "--data-dir", str(tmp_path / "d")])
    assert capsys.readouterr().err == (
        f"error: {where}: examples would install the top-level module examples ({wheel.name}), the name of the "
        f"script's own examples ({repo / 'examples'}): a package of the index never stands in for the script's own "
        f"code, so drop it from the requirements\n") and code == 2
    # nothing installed, nothing run
    assert not (tmp_path / "s" / "results").exists() and not (tmp_path / "s" / "work").exists()
    assert not [p for p in cache.rglob("examples/__init__.py")] and not list(tmp_path.rglob("site-packages"))


def test_a_package_named_like_a_module_of_the_lock_is_left_out_of_the_copy(kit_python, tmp_path):
    kit_python("jax")
    repo = _repository(tmp_path)
    (repo / "jax").mkdir()                           # a checkout of the library beside its examples
    (repo / "jax" / "__init__.py").write_text("raise ImportError('the source checkout')\n")
    (repo / "docs" / "optax").mkdir(parents=True)    # deeper than the top of the import path: the user's
    (repo / "docs" / "optax" / "__init__.py").write_text("")
    (repo / "flax").mkdir()                          # no __init__.py: it cannot stand in for the installed package
    entry = from_scripts("pkg", {"jax": repo / "examples" / "mnist_classifier.py"}).scripts["jax"]
    assert entry["left_out"] == ["jax"]
    work_folder.make(repo, tmp_path / "work", entry["left_out"])
    copied = {p.relative_to(tmp_path / "work").as_posix() for p in (tmp_path / "work").rglob("*.py")}
    assert copied == {"examples/__init__.py", "examples/datasets.py", "examples/mnist_classifier.py",
                      "docs/optax/__init__.py"}
    assert work_folder.copied_bytes(repo, ["jax"]) < work_folder.copied_bytes(repo)
    # a script of the package that imports jax and what lies beside it: the checkout is not its own package, so it
    # runs as `python SCRIPT` from its own folder, where no checkout stands in for jax
    (repo / "examples" / "plain_jax.py").write_text("import jax\nimport datasets\n")
    entry = from_scripts("pkg", {"jax": repo / "examples" / "plain_jax.py"}).scripts["jax"]
    assert (entry["folder"], entry["path"], entry["module"], entry["left_out"]) == (
        repo / "examples", "plain_jax.py", None, [])


def test_module_names_map_to_their_distributions(kit_python):
    for framework in ("pytorch", "tensorflow", "jax"):
        kit_python(framework)
    assert module_names.distribution("yaml", "jax") == ("pyyaml", True)             # the JAX environment's PyYAML
    assert module_names.distribution("absl.flags", "jax") == ("absl-py", True)
    assert module_names.distribution("tensorflow", "jax") == ("tensorflow-cpu", True)    # the TensorFlow env's
    # google is a namespace several distributions share in the TensorFlow environment: the table names the one
    assert module_names.distribution("google.protobuf", "tensorflow") == ("protobuf", True)
    assert module_names.distribution("sklearn", "jax") == ("scikit-learn", True)     # in no kit environment
    assert module_names.distribution("tensorboard", "jax") == ("tensorboard", False)     # a guess, said so
    assert module_names.way_out("jax", "tensorflow", None) == (
        "add it with --require jax=tensorflow-cpu or a requirements.txt beside the script (tensorflow-cpu provides "
        "tensorflow)")
    assert module_names.way_out("jax", "cv2", "requirements.txt") == (
        "add opencv-python-headless to requirements.txt (opencv-python-headless provides cv2)")


# Run in each kit environment: for each (module, distribution) of the table whose module the environment has, the
# distribution that installed the module's file.
_OWNER = textwrap.dedent("""\
    import importlib.metadata, importlib.util, json, os, sys
    wanted = {}
    for module, dist in json.loads(sys.argv[1]).items():
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is not None and spec.origin:
            wanted[os.path.realpath(spec.origin)] = module
    out = {}
    for found in importlib.metadata.distributions():
        for f in found.files or ():
            if str(f).endswith(".py") and (module := wanted.get(os.path.realpath(f.locate()))):
                out[module] = found.metadata["Name"]
    print(json.dumps(out))
    """)


def test_the_table_says_what_the_environments_that_hold_its_packages_say(kit_python):
    checked = {}
    for framework in ("pytorch", "tensorflow", "jax"):
        python = kit_python(framework)
        proc = subprocess.run([str(python), "-I", "-c", _OWNER, json.dumps(module_names.TABLE)], capture_output=True,
                              text=True, check=True)
        checked |= {m: module_names.canonical(d) for m, d in json.loads(proc.stdout).items()}
    assert {m: module_names.TABLE[m] for m in checked} == checked
    assert {"yaml", "absl", "google.protobuf"} <= checked.keys(), checked       # the table is tested, not trusted
    assert all(d == module_names.canonical(d) for d in module_names.TABLE.values())
    print(f"\nthe table's {len(checked)} entries the environments hold agree: {', '.join(sorted(checked))}")


def test_suggested_flags_name_each_package_once_in_the_users_order():
    assert cli.parse(["--require", "jax=equinox", "--require", "jax=equinox,torch", "--require", "jax=Equinox",
                      "--require", "jax=matplotlib>=3.5,<4"]).what.requires == {
        "jax": ("equinox", "torch", "matplotlib>=3.5,<4")}
    assert module_names.require_flag("jax", ["equinox", "equinox", "equinox"], "torch") == "--require jax=equinox,torch"
    assert module_names.way_out("jax", "torch", "--require jax=equinox,torch") == "add it with --require jax=equinox,torch"
    assert module_names.way_out("jax", "PIL.Image", "--require jax=equinox") == (
        "add it with --require jax=equinox,pillow (pillow provides PIL.Image)")


def test_a_failed_import_of_the_scripts_own_module_gets_the_m_form(tmp_path):
    """The host's sentence for a run that failed on an import the scan could not see (importlib.import_module): the
    module is the script's own, so the way out is how to run it, never a package."""
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    (project / "mylib").mkdir()
    (project / "mylib" / "__init__.py").write_text("")
    result = {"status": "failed", "spec": {"framework": "jax", "script": {
        "folder": str(project / "scripts"), "path": "train.py", "requirements": None}},
        "failure": {"kind": "error", "message": "the script raised ModuleNotFoundError: No module named 'mylib'",
                    "missing_module": {"name": "mylib", "file": str(tmp_path / "work" / "train.py"), "line": 3}}}
    module_names.explain_missing(result)
    assert result["failure"]["message"] == (
        f"the script raised ModuleNotFoundError: No module named 'mylib': train.py line 3 imports mylib, a package of "
        f"the script's own tree ({project / 'mylib'}) that `python train.py` does not put on the path: run it as its "
        f"module from {project}: --script \"jax=-m scripts.train\" there, or module = \"scripts.train\" with folder = "
        f"\"{project}\" in [scripts]")


"""A script's extra requirements (reprokit/environments/script_requirements.py): plain names resolved against the
lock into hash-pinned wheels (script_packages.py), or a hash-pinned file as written, installed with no network in
the run; and the import scan that refuses, before any run, a module the environment lacks (import_scan.py).

The tutorials' requirement, matplotlib, is resolved against the real index once per test session (the suite's
own per-user cache keeps the set); the hash-pinned form's package is a real wheel the test builds, which pip
fetches from a local folder (PIP_FIND_LINKS, PIP_NO_INDEX), as a user behind a mirror would.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from checkout import REPO

from reprokit import cli
from reprokit.environments import cache, requirement_sets, script_packages, script_requirements
from reprokit.errors import UserError
from reprokit.execute import data_step

SCRIPTS = Path(__file__).parent / "user_scripts"
CORPUS = Path(__file__).parent / "corpus"
NAME, VERSION = "reprokit_probe_extra", "1.0"
LOCKED_NUMPY = script_requirements.locked("pytorch")["numpy"]


def _wheel(folder: Path) -> str:
    """A pure-Python wheel of a one-constant package; returns its sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{NAME}-{VERSION}-py3-none-any.whl"
    info = f"{NAME}-{VERSION}.dist-info"
    files = {f"{NAME}/__init__.py": "WIDTH = 24\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), text)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _experiment(folder: Path, requirements: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPTS / "extras" / "torch_extra.py", folder)
    (folder / "requirements.txt").write_text(requirements)
    (folder / "extra.toml").write_text('[experiment]\nname = "extra"\ntitle = "A script with a requirement"\n'
                                       'frameworks = ["pytorch"]\n\n[scripts]\n'
                                       'pytorch = { path = "torch_extra.py", requirements = "requirements.txt" }\n')
    return folder


def _numpy_pin() -> str:
    """numpy as the PyTorch lock pins it, version and hashes."""
    lines = script_requirements._logical_lines((REPO / "locks" / "pytorch.txt").read_text())
    return next(line for line in lines if line.startswith("numpy=="))


def _reproduce(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reprokit", "reproduce", *args, "--backend", "local", "--profile",
                           "quick"], cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def matplotlib_set() -> dict:
    """The tutorials' requirements.txt (a bare ``matplotlib``) resolved against the PyTorch lock: the real
    index, once a session (the suite's per-user cache keeps it for the runs after)."""
    settled = script_requirements.settle(script_requirements.from_file(CORPUS / "cifar10_tutorials",
                                                                       "requirements.txt"), "pytorch")
    assert settled is not None
    return settled


@pytest.mark.slow
def test_a_tutorial_that_imports_matplotlib_runs_with_the_requirements_beside_it(kit_python, matplotlib_set,
                                                                                 tmp_path, data_dir):
    kit_python("pytorch")
    install = matplotlib_set["install"]
    assert any(line.startswith("matplotlib==") and "--hash=sha256:" in line for line in install)
    assert not any(line.startswith(("numpy==", "pillow==", "torch==")) for line in install)    # the lock's own
    kept = (cache.root() / script_packages.RESOLVED).glob("*.json")                              # kept per user
    assert any(json.loads(path.read_text()).get("install") == install for path in kept)
    # a short state folder: the DataLoader workers' Unix sockets live under the run's TMPDIR, inside it, and a
    # socket's path has at most 107 bytes (pytest's tmp_path is longer: the workers hang)
    with tempfile.TemporaryDirectory(prefix="rk-", dir="/tmp") as state:
        proc = _reproduce("--script", f"pytorch={CORPUS / 'cifar10_tutorials' / 'train_classifier.py'}",
                          "--frameworks", "pytorch", "--state-dir", state, "--data-dir", str(data_dir),
                          "--reports-dir", str(tmp_path / "reports"), "--name", "tutorial")
        (path,) = (Path(state) / "results").glob("*.json")
        result = json.loads(path.read_text())
    assert "resolving" not in proc.stdout, proc.stdout      # the set came from the cache
    assert result["status"] == "ok", (result["failure"], proc.stdout[-2000:], proc.stderr[-2000:])
    req = result["spec"]["script"]["requirements"]
    assert req["file"] == "requirements.txt" and req["install"] == install and req["in_lock"] == []
    shims = result["probe"]["shims"]
    assert any(s.startswith("its requirements requirements.txt from hash-checked wheels, installed once on this "
                            "machine (read-only, pytorch-") and "matplotlib==" in s for s in shims), shims
    assert "matplotlib draws off screen (MPLBACKEND=Agg): plt.show() shows nothing and returns" in shims


def test_require_replaces_the_file_and_a_lock_pin_is_set_aside(matplotlib_set, capsys):
    from reprokit.plan.experiments import from_scripts
    from reprokit.plan.plan import Options
    from reprokit.plan.script_plan import specs_for
    exp = from_scripts("tut", {"pytorch": CORPUS / "cifar10_tutorials" / "train_classifier.py"})
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("pytorch",),
                   data=data_step.LookedUp(Path("unused")))
    (spec,) = specs_for(exp.name, exp.scripts, opts, lambda fw: {"lock": None, "lock_sha256": None, "image": None},
                        {}, require={"pytorch": ("matplotlib", "numpy<2")})
    req = spec.to_dict()["script"]["requirements"]
    assert req["file"] == "--require pytorch=matplotlib,numpy<2"
    assert req["install"] == matplotlib_set["install"]                   # numpy aside, the same set (cached)
    assert req["in_lock"] == [f"numpy<2 (set aside for the lock's numpy=={LOCKED_NUMPY})"]
    assert capsys.readouterr().out == (f"--require pytorch: numpy<2 is set aside: the pytorch lock's numpy=="
                                       f"{LOCKED_NUMPY} decides (the kit measures the lock's libraries).\n")


def test_require_takes_names_repeated_or_comma_separated():
    assert cli.parse(["--require", "pytorch=matplotlib>=3.5,<4,tqdm", "--require", "pytorch=a[b,c]",
                      "--require", "tensorflow=seaborn"]).what.requires == {
        "pytorch": ("matplotlib>=3.5,<4", "tqdm", "a[b,c]"), "tensorflow": ("seaborn",)}
    with pytest.raises(UserError, match=r"--require 'torch=matplotlib' is not understood; use --require "
                                        r"FRAMEWORK=NAME\[,NAME...\]"):
        cli.parse(["--require", "torch=matplotlib"])
    # a comment and a version range, as the quickstarts' file has them
    assert script_requirements.from_file(CORPUS / "fashion_quickstarts", "requirements.txt").lines == \
        ("matplotlib>=3.5",)


@pytest.mark.parametrize("text, says", [
    ("git+https://github.com/matplotlib/matplotlib\n",
     "requirements.txt: git+https://github.com/matplotlib/matplotlib is not a package name with an optional version "
     "range (a URL, a path or a repository is not on an index); name a released package, or give its wheel with "
     "PIP_FIND_LINKS."),
    ("--find-links /opt/wheels\nmatplotlib\n",
     "requirements.txt: --find-links is not allowed in a script's requirements; name each package (a version range "
     "is optional), and give wheels of your own with PIP_FIND_LINKS."),
    ("matplotlib==0.0.1\n",
     "requirements.txt: matplotlib==0.0.1 cannot be installed: no release for Python 3.11 on Linux x86_64 matches "
     "it (the newest: "),
])
def test_a_line_pip_cannot_take_is_refused_before_any_run(tmp_path, capsys, text, says):
    folder = tmp_path / "tutorial"
    folder.mkdir()
    shutil.copy(CORPUS / "cifar10_tutorials" / "train_classifier.py", folder)
    (folder / "requirements.txt").write_text(text)
    code = cli.main(["reproduce", "--script", f"pytorch={folder / 'train_classifier.py'}", "--frameworks", "pytorch",
                     "--backend", "local", "--state-dir", str(tmp_path / "state"), "--data-dir", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error: ") == 1 and f"{folder}/{says}" in err, err
    assert not (tmp_path / "state" / "results").exists()


def test_the_import_scan_names_a_module_the_environment_lacks_before_any_run(kit_python, tmp_path, capsys):
    kit_python("pytorch")
    folder = tmp_path / "tutorial"                        # the tutorial, without the requirements.txt beside it
    folder.mkdir()
    shutil.copy(CORPUS / "cifar10_tutorials" / "train_classifier.py", folder)
    args = ["reproduce", "--script", f"pytorch={folder / 'train_classifier.py'}", "--frameworks", "pytorch",
            "--backend", "local", "--state-dir", str(tmp_path / "state"), "--data-dir", str(tmp_path / "d")]
    assert cli.main(args) == 2
    assert capsys.readouterr().err == ("error: train_classifier.py imports matplotlib, which the pytorch environment "
                                       "lacks: add it with --require pytorch=matplotlib or a requirements.txt beside "
                                       "the script\n")
    assert not (tmp_path / "state" / "results").exists()


def test_the_scan_reads_top_level_names_and_leaves_optional_imports_out(kit_python, tmp_path):
    from reprokit.environments import import_scan
    python = kit_python("pytorch")
    (tmp_path / "local_helpers.py").write_text("import yaml_for_helpers\nfrom . import sibling\nimport broken\n")
    (tmp_path / "broken.py").write_text("def (:\n")           # its run fails with its SyntaxError: not the scan's
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "inner.py").write_text("import PIL.Image\n")
    (tmp_path / "train.py").write_text(
        "import os, json\nimport torch.utils.data\nfrom tensorflow.keras import layers\nimport local_helpers\n"
        "from pkg import inner\n"
        "try:\n    import wandb\nexcept ImportError:\n    wandb = None\n"
        "try:\n    import comet_ml\nexcept (ValueError, ModuleNotFoundError):\n    pass\n"
        "def later():\n    import seaborn\n")
    assert import_scan.scan(tmp_path, ["train.py"]) == {
        "torch": "train.py", "tensorflow": "train.py", "seaborn": "train.py", "yaml_for_helpers": "local_helpers.py",
        "PIL": "pkg/inner.py"}
    lacking = []
    with pytest.raises(UserError) as refused:
        import_scan.check(tmp_path, ["train.py"], "pytorch", ["torch", "tensorflow"], {"seaborn"}, lambda: python,
                          lambda m: lacking.append(m) or f"add {m}")
    # PIL is pillow's (asked of the environment, which has it); the helper's import is not there
    assert str(refused.value) == "local_helpers.py imports yaml_for_helpers, which the pytorch environment lacks: " \
                                 "add yaml_for_helpers" and lacking == ["yaml_for_helpers"]


# where the package came from, appended to the file its argument names by each run; then torch_extra.py's training
WHERE_FROM = """
import json, sys
import reprokit_probe_extra
with open(sys.argv[1], "a") as out:
    out.write(json.dumps({"file": reprokit_probe_extra.__file__, "path": sys.path}) + "\\n")
"""


def _files_named(root: Path, part: str) -> list[Path]:
    """The files and folders under the checkout whose name holds ``part`` (its environments and git's own aside)."""
    found = []
    for parent, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".nox", ".git")]
        found += [Path(parent, n) for n in [*dirs, *names] if part in n]
    return found


@pytest.mark.slow
def test_a_hash_pinned_file_is_installed_once_and_read_by_every_run(kit_python, tmp_path, data_dir, monkeypatch):
    kit_python("pytorch")
    digest = _wheel(tmp_path / "wheels")
    folder = _experiment(tmp_path / "exp", f"# what the script imports beyond torch\n{NAME.replace('_', '-')}=="
                                           f"{VERSION} \\\n    --hash=sha256:{digest}\n{_numpy_pin()}\n")
    script = folder / "where_from.py"
    script.write_text(WHERE_FROM + (folder / "torch_extra.py").read_text())     # first: the probe bounds its training
    records = tmp_path / "records.jsonl"
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "wheels")}

    def reproduce(state: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "reprokit", "reproduce", "--script", f"pytorch={script} {records}",
                               "--frameworks", "pytorch", "--repeats", "2", "--backend", "local", "--profile", "quick",
                               "--state-dir", str(tmp_path / state), "--data-dir", str(data_dir), "--reports-dir",
                               str(tmp_path / "reports")], cwd=REPO, capture_output=True, text=True, timeout=600,
                              env=env)
    proc = reproduce("state")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # downloaded once into the per-user cache, installed once, before the runs
    assert proc.stdout.count(f"requirements: downloading 1 wheel(s) for where_from.py into "
                             f"{cache.root() / 'wheels'}\n") == 1, proc.stdout
    assert proc.stdout.count("requirements: installing 1 package(s) for where_from.py into ") == 1, proc.stdout
    results = [json.loads(p.read_text()) for p in (tmp_path / "state" / "results").glob("*.json")]
    assert len(results) == 2 and {r["spec"]["repeat"] for r in results} == {0, 1}
    installed = requirement_sets.for_spec(results[0]["spec"])
    assert installed is not None and installed.parent == cache.root() / "requirement-sets"
    for result in results:
        assert result["status"] == "ok", result["failure"]
        req = result["spec"]["script"]["requirements"]
        assert req["in_lock"] == [_numpy_pin().split()[0]] and len(req["install"]) == 1
        said = f"its requirements requirements.txt from hash-checked wheels, installed once on this machine (read-only, " \
               f"{installed.name}), after the lock's packages: reprokit-probe-extra==1.0 (already in the lock: numpy=="
        assert any(shim.startswith(said) for shim in result["probe"]["shims"]), result["probe"]["shims"]
        assert result["model"]["parameters"]["total"] == 3 * 32 * 32 * 24 + 24 + 24 * 10 + 10    # its WIDTH, 24
    # each run imported the package from the one installed set, searched after the environment's own packages
    for record in map(json.loads, records.read_text().splitlines()):
        assert record["file"] == str(installed / NAME / "__init__.py")
        site = next(i for i, p in enumerate(record["path"]) if p.endswith("site-packages"))
        assert record["path"].index(str(installed)) > site
    assert not list((tmp_path / "state").rglob("*probe_extra*")), "a run installed packages of its own"
    assert not [p for p in [installed, *installed.rglob("*")] if p.stat().st_mode & 0o222]        # read-only

    # the next command (a fresh state folder) downloads and installs nothing: its runs read the same set
    again = reproduce("again")
    assert again.returncode == 0 and "requirements:" not in again.stdout, again.stdout[-2000:] + again.stderr[-2000:]
    assert len(records.read_text().splitlines()) == 4
    assert _files_named(REPO, "probe_extra") == []              # nothing of the script's packages in the checkout

    # the wheel is the one hashed: another wheel under the same name is refused at the download
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    with pytest.raises(UserError, match="could not be downloaded"):
        requirement_sets.wheels([f"{NAME}=={VERSION} --hash=sha256:{'0' * 64}"], "torch_extra.py", log=lambda line: None)

"""A script's extra requirements kept once per machine (reprokit/environments/requirement_sets.py): one wheel file per
wheel in the per-user cache, shared by every set and never downloaded twice; each set installed once, read-only,
while a second command that needs it waits. Real pip, from a local folder of tiny wheels the tests build (as a
user behind a mirror gives them with PIP_FIND_LINKS), no index."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from checkout import REPO

from reprokit.environments import requirement_sets
from reprokit.errors import UserError
from reprokit.kits.contract.spec import ScriptSpec

# the installer named by the facts: this interpreter (a run with --python names its own)
FACTS = {"lock": None, "lock_sha256": None, "interpreter": sys.executable}


def wheel(folder: Path, name: str, version: str = "1.0", body: str = "VALUE = 1\n", table: int = 0,
          module: str | None = None) -> str:
    """A pure-Python wheel of one package, its module ``name`` (or the folder ``module``), with a data file of
    ``table`` bytes where given, as a library's; returns its line, hash-pinned."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    module = module or name
    files = {f"{module}/__init__.py": body, **({f"{module}/table.bin": "7" * table} if table else {}),
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},sha256={_digest(text)},{len(text)}\n" for n, text in files.items()) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for member, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(zipfile.ZipInfo(member, (2026, 1, 1, 0, 0, 0)), text)
    return f"{name.replace('_', '-')}=={version} --hash=sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"


def _digest(text: str) -> str:
    """A file's hash as a wheel's RECORD writes it."""
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A per-user cache of the test's own, and pip pointed at a folder of wheels instead of an index."""
    monkeypatch.setenv("REPROKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "mirror"))
    yield tmp_path / "mirror"
    for folder in (tmp_path / "cache" / requirement_sets.SETS).glob("*"):
        if folder.is_dir():
            requirement_sets.remove(folder)         # read-only: pytest could not remove it


def test_two_sets_share_one_file_per_wheel_and_none_is_downloaded_twice(mirror):
    alpha, shared, gamma = wheel(mirror, "rk_alpha"), wheel(mirror, "rk_shared"), wheel(mirror, "rk_gamma")
    said: list[str] = []
    first = requirement_sets.install([alpha, shared], FACTS, "one.py", said.append)
    assert said[0] == f"requirements: downloading 2 wheel(s) for one.py into {requirement_sets.wheels_folder()}"
    (mirror / "rk_shared-1.0-py3-none-any.whl").unlink()      # a second download of it would fail now
    said.clear()
    second = requirement_sets.install([shared, gamma], FACTS, "two.py", said.append)
    assert said[0] == (f"requirements: downloading 1 wheel(s) for two.py into {requirement_sets.wheels_folder()} "
                       f"(1 already there)")
    assert first != second and first.parent == second.parent == requirement_sets.sets_folder()
    assert sorted(p.name for p in requirement_sets.wheels_folder().iterdir()) == [
        "rk_alpha-1.0-py3-none-any.whl", "rk_gamma-1.0-py3-none-any.whl", "rk_shared-1.0-py3-none-any.whl"]
    for folder, names in ((first, ("rk_alpha", "rk_shared")), (second, ("rk_shared", "rk_gamma"))):
        assert all((folder / name / "__init__.py").is_file() for name in names)
        assert requirement_sets.marker(folder)["wheels"] == [f"{n}-1.0-py3-none-any.whl" for n in names]
        assert requirement_sets.ready(folder, requirement_sets.marker(folder)["install"])
    # compiled at install: a read-only set's imports need not compile it again in every run
    assert list((first / "rk_alpha" / "__pycache__").glob("__init__.cpython-*.pyc"))

    # installed whole and read-only: a run cannot change it, and the next command installs nothing
    writable = [p for p in [first, *first.rglob("*")] if not p.is_symlink() and p.stat().st_mode & 0o222]
    assert writable == [] and stat.S_IMODE(first.stat().st_mode) == 0o555
    said.clear()
    assert requirement_sets.install([alpha, shared], FACTS, "one.py", said.append) == first and said == []


def test_a_package_another_set_holds_is_linked_from_it_not_installed_again(mirror):
    big, alpha, gamma = wheel(mirror, "rk_big", table=1 << 20), wheel(mirror, "rk_alpha"), wheel(mirror, "rk_gamma")
    first = requirement_sets.install([big, alpha], FACTS, "one.py", lambda text: None)
    said: list[str] = []
    second = requirement_sets.install([gamma, big], FACTS, "two.py", said.append)
    assert said[-2].endswith("(once on this machine, read by every run of them; 1 linked from sets that hold them)")
    assert said[-1].endswith(", 1 MB of it shared with other sets)"), said
    for name in ("rk_big/table.bin", "rk_big/__init__.py", "rk_big/__pycache__/__init__.cpython-311.pyc",
                 "rk_big-1.0.dist-info/RECORD"):       # its files, its bytecode and its record: one copy each
        assert (second / name).stat().st_ino == (first / name).stat().st_ino, name
    assert (second / "rk_gamma" / "__init__.py").stat().st_nlink == 1           # installed by pip
    assert requirement_sets.marker(second)["dist_info"] == ["rk_gamma-1.0.dist-info", "rk_big-1.0.dist-info"]
    requirement_sets.remove(first)                     # the other set keeps the files, whole and read-only
    table = second / "rk_big" / "table.bin"
    assert table.read_text() == "7" * (1 << 20) and not table.stat().st_mode & 0o222
    assert requirement_sets.ready(second, [gamma, big])


def test_packages_of_one_namespace_merge_into_a_set(mirror):
    """Two wheels that each install a module under one folder (as nvidia-cublas and nvidia-cudnn do under nvidia/),
    one linked from another set and one installed by pip: both are there."""
    cublas, cudnn, alpha = (wheel(mirror, f"rk_ns_{name}", module=f"rk_ns/{name}", table=1 << 10)
                            for name in ("cublas", "cudnn", "alpha"))
    requirement_sets.install([cublas, alpha], FACTS, "one.py", lambda text: None)
    second = requirement_sets.install([cublas, cudnn], FACTS, "two.py", lambda text: None)
    assert sorted(p.name for p in (second / "rk_ns").iterdir()) == ["cublas", "cudnn"]
    assert (second / "rk_ns" / "cublas" / "table.bin").stat().st_nlink == 2


def test_a_cached_wheel_whose_bytes_differ_from_its_hash_is_downloaded_again(mirror):
    line = wheel(mirror, "rk_alpha")
    requirement_sets.wheels([line], "one.py", lambda text: None)
    cached = requirement_sets.wheels_folder() / "rk_alpha-1.0-py3-none-any.whl"
    cached.chmod(0o644)
    cached.write_bytes(b"not the wheel its line names")
    (path,) = requirement_sets.wheels([line], "one.py", lambda text: None)
    assert path == cached and hashlib.sha256(cached.read_bytes()).hexdigest() == line.split("sha256:")[1]


def test_a_wheel_that_is_nowhere_is_refused_in_one_sentence(mirror):
    line = wheel(mirror, "rk_alpha")
    (mirror / "rk_alpha-1.0-py3-none-any.whl").unlink()
    with pytest.raises(UserError) as refused:
        requirement_sets.install([line], FACTS, "one.py", lambda text: None)
    assert str(refused.value).startswith("the extra requirements of one.py could not be downloaded (")
    assert str(refused.value).endswith("reach PyPI once (runs never do), or point pip at your wheels with "
                                       "PIP_FIND_LINKS")
    assert not requirement_sets.folder_for([line], FACTS).exists()


def test_a_set_cut_short_is_said_and_installed_again(mirror):
    line = wheel(mirror, "rk_alpha")
    folder = requirement_sets.install([line], FACTS, "one.py", lambda text: None)
    requirement_sets.remove(folder / "rk_alpha-1.0.dist-info")       # a package deleted by hand
    said: list[str] = []
    assert requirement_sets.install([line], FACTS, "one.py", said.append) == folder
    assert said[0] == f"the requirement set {folder} was cut short or damaged: installing it again"
    assert requirement_sets.ready(folder, [line])


# One command that needs the set: it prints what install() says; told to, it stops once it has begun installing,
# until a line comes on its stdin, so that a second command finds the install under way.
NEEDS_SET = """
import sys
from reprokit.environments import requirement_sets
def log(line):
    print(line, flush=True)
    if line.startswith("requirements: installing") and sys.argv[2] == "pause":
        sys.stdin.readline()
facts = {"lock": None, "lock_sha256": None, "interpreter": sys.executable}
print("ready", requirement_sets.install([sys.argv[1]], facts, "train.py", log), flush=True)
"""


def test_two_commands_that_need_one_set_install_it_once(mirror):
    line = wheel(mirror, "rk_alpha")
    folder = requirement_sets.folder_for([line], FACTS)

    def command(pause: bool, **kwargs) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", NEEDS_SET, line, "pause" if pause else "go"], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ, **kwargs)
    first = command(True, stdin=subprocess.PIPE)
    assert first.stdout.readline().startswith("requirements: downloading 1 wheel(s) for train.py")
    assert first.stdout.readline().startswith(f"requirements: installing 1 package(s) for train.py into {folder}")
    second = command(False, stdin=subprocess.DEVNULL)
    waited = second.stdout.readline()             # said before it blocks on the lock
    assert waited.startswith(f"waiting for the requirement set {folder}: pid {first.pid} (`"), waited
    first_out, _ = first.communicate("go on\n", timeout=120)
    second_out, _ = second.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, first_out + second_out
    assert second_out == f"ready {folder}\n"       # it downloaded and installed nothing
    assert requirement_sets.ready(folder, [line])


@pytest.mark.slow
def test_a_ray_node_installs_the_set_once_from_the_heads_wheels(mirror, tmp_path, monkeypatch):
    """The head serves the wheels its set was installed from; a node with a per-user cache of its own (and no index
    nor mirror) copies them into its wheel cache and installs the set there, once, before its first run of it."""
    import ray_cluster  # noqa: F401 - sets Ray's environment before Ray is imported
    ray = pytest.importorskip("ray", reason="Ray is not installed here (pip install '.[ray]')")
    from reprokit.execute import node_staging
    from reprokit.execute.cluster import _Head
    line = wheel(mirror, "rk_alpha", body="WIDTH = 24\n")
    spec, folder = _planned(tmp_path, line)
    requirement_sets.install_all([spec.to_dict()], log=lambda text: None)        # on the head, before any run
    served = node_staging.script_files([spec])
    assert sorted(name for name in served if name.startswith("wheels/")) == [
        f"wheels/{requirement_sets.folder_for([line], spec.provenance).name}/rk_alpha-1.0-py3-none-any.whl"]

    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="rk-", dir="/tmp"))
    try:
        head = ray.remote(_Head).remote(served, None)
        monkeypatch.setenv("REPROKIT_CACHE", str(tmp_path / "node-cache"))       # the node's own
        monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
        staged = node_staging.stage_script(head, spec, tmp_path / "node")
        again = node_staging.stage_script(head, spec, tmp_path / "node")
    finally:
        ray.shutdown()
    installed = requirement_sets.for_spec(staged.to_dict())
    assert installed == tmp_path / "node-cache" / "requirement-sets" / installed.name and again == staged
    assert requirement_sets.ready(installed, [line]) and (installed / "rk_alpha" / "__init__.py").is_file()
    assert [p.name for p in (tmp_path / "node-cache" / "wheels").iterdir()] == ["rk_alpha-1.0-py3-none-any.whl"]
    assert (Path(staged.script.folder) / "train.py").read_text() == (folder / "train.py").read_text()


def _planned(tmp_path: Path, line: str) -> tuple[ScriptSpec, Path]:
    """The spec of a script that imports the line's package, planned as a command plans it (its wheels fetched, its
    imports checked), with this interpreter named as its runs' (--python), and the script's folder."""
    from reprokit import cli
    from reprokit.execute import compose
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "train.py").write_text("import rk_alpha\nprint(rk_alpha.WIDTH)\n")
    (folder / "requirements.txt").write_text(line + "\n")
    (spec,) = compose.build(cli.parse([
        "--script", f"pytorch={folder / 'train.py'}", "--frameworks", "pytorch", "--backend", "local", "--profile",
        "quick", "--python", sys.executable, "--data-dir", str(tmp_path / "data"), "--state-dir",
        str(tmp_path / "state")])).specs
    assert isinstance(spec, ScriptSpec)
    return spec, folder


@pytest.mark.slow
def test_the_probe_reads_no_set_it_was_not_given_nor_one_of_other_lines(mirror, tmp_path, kit_python):
    python = kit_python("pytorch")
    spec, folder = _planned(tmp_path, wheel(mirror, "rk_alpha", body="WIDTH = 24\n"))
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_dict()))
    other = requirement_sets.install([wheel(mirror, "rk_gamma")], FACTS, "other.py", lambda text: None)
    for given, where in (((), ""), (("--requirements", str(other)), f" in {other}")):
        out = tmp_path / "out" / "result.json"
        proc = subprocess.run([str(python), "-m", "reprokit.kits.probe", "--spec", str(tmp_path / "spec.json"), "--out",
                               str(out), "--data-dir", str(tmp_path / "data"), "--script-dir", str(folder), *given],
                              cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                              timeout=300)
        failure = json.loads(out.read_text())["failure"]
        assert proc.returncode == 1 and failure["message"] == (
            f"DataError: the requirements of train.py are not installed{where}: the host installs them once, before "
            f"any run; run the command again"), failure


def test_every_call_of_a_run_gives_the_probe_the_set_and_a_container_mounts_it_read_only(mirror, tmp_path):
    from reprokit.runners import container_mounts
    from reprokit.runners.base import spec_call
    spec, _ = _planned(tmp_path, wheel(mirror, "rk_alpha", body="WIDTH = 24\n"))
    requirement_sets.install_all([spec.to_dict()], log=lambda text: None)
    installed = requirement_sets.for_spec(spec.to_dict())
    call = spec_call(spec.to_dict(), tmp_path / "spec.json", tmp_path / "out", tmp_path / "data")
    assert call.module == "reprokit.kits.probe" and installed in call.inputs            # as the local runner passes it
    assert call.args[call.args.index("--requirements") + 1] == installed
    mounts = container_mounts.call_mounts(call, REPO / "reprokit" / "kits", [], tmp_path / "data", None)
    (target,) = [t for host, t, writable in mounts if host == installed and not writable]
    assert container_mounts.container_path(installed, mounts) == target
    assert target.startswith(container_mounts.INPUTS_TARGET + "/")

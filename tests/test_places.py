"""A command in the user's own folder (reprokit/places.py): its state in ./.reprokit/, its reports in
./reprokit-reports/, both named on its first line; the datasets in the per-user cache, shared by every project; a
read-only working folder refused in one sentence naming --state-dir; a script's path taken relative to the working
folder, outside it too, and recorded as given, with its git commit where it has one."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import REPO

from reprokit import cli
from reprokit.environments import cache
from reprokit.execute import compose

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _reprokit(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reprokit", *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=300)


VERBS = {
    "reproduce": ["reproduce", "--dry-run", "--backend", "local", "--only", "simplecnn_cifar10_memory", "--claims",
                  "none", "--variants", "fixed"],
    "compare": ["compare", str(REPO / "reports" / "quick-cpu"), str(REPO / "reports" / "quick-cpu")],
    "data": ["data", "--offline", "--data-dir", "{here}/data", "mnist"],          # refused offline, after its line
    "bisect": ["bisect", "fixed", "as_posted", "--experiment", "simplecnn_cifar10_memory", "--budget", "1"],
    "cache": ["cache", "list"],
    "doctor": ["doctor"],
}


@pytest.mark.parametrize("verb", VERBS)
def test_every_command_names_its_state_and_reports_folders_on_its_first_line(verb, tmp_path):
    args = [a.format(here=tmp_path) for a in VERBS[verb]]
    proc = _reprokit(tmp_path, *args)
    assert proc.stdout.splitlines()[:1] == [f"state: {tmp_path}/.reprokit  reports: {tmp_path}/reprokit-reports"], \
        proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_the_folders_follow_the_working_folder_and_the_data_stays_in_the_per_user_cache(tmp_path, monkeypatch):
    for here in (tmp_path / "one", tmp_path / "two"):
        here.mkdir()
        monkeypatch.chdir(here)
        how = cli.parse([]).how
        assert (how.state_dir, how.reports_dir, how.data_dir) == (here / ".reprokit", here / "reprokit-reports",
                                                                   cache.root() / "data")
    given = cli.parse(["--state-dir", "s", "--reports-dir", "../r"]).how
    assert (given.state_dir, given.reports_dir) == (tmp_path / "two" / "s", tmp_path / "r")
    proc = _reprokit(tmp_path, "doctor", "--state-dir", "s", "--reports-dir", "r")
    assert proc.stdout.splitlines()[0] == f"state: {tmp_path}/s  reports: {tmp_path}/r"


@pytest.fixture
def read_only(tmp_path):
    """A read-only folder: a read-only tmpfs as root (root writes through permission bits), else mode 555."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.alone              # it mounts a file system (root), which the signal tests watch for
def test_a_read_only_working_folder_is_one_sentence_naming_state_dir(read_only, tmp_path):
    args = ("reproduce", "--backend", "local", "--only", "simplecnn_cifar10_memory", "--claims", "none", "--variants",
            "fixed")
    refused = _reprokit(read_only, *args)
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"error: the working folder {read_only} is read-only, so the kit cannot keep its state (.reprokit/) and "
        f"reports (reprokit-reports/) in it: run in a folder you can write, or give --state-dir DIR and --reports-dir "
        f"DIR on a disk you can write."], refused.stderr
    given = _reprokit(tmp_path, *args, "--state-dir", str(read_only / "state"))
    assert given.returncode == 2 and given.stderr.splitlines() == [
        f"error: --state-dir {read_only}/state cannot be written (read-only): give --state-dir a folder you can write."]
    dry = _reprokit(read_only, *args, "--dry-run")                 # writes nothing: it runs there
    assert dry.returncode == 0 and "dry run: nothing was started" in dry.stdout, dry.stderr[-2000:]


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_script_outside_the_working_folder_runs_and_is_recorded_as_given_with_its_commit(tmp_path, monkeypatch):
    here, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    (elsewhere / "train.py").write_text((REPO / "tests" / "user_scripts" / "torch_fixed.py").read_text())
    _git(elsewhere, "init", "-q")
    _git(elsewhere, "add", "train.py")
    _git(elsewhere, "commit", "-qm", "the script")
    monkeypatch.chdir(here)

    def planned() -> dict:
        m = compose.build(cli.parse(["--script", "pytorch=../elsewhere/train.py", "--backend", "local", "--dry-run"]))
        (spec,) = m.specs
        assert spec.script.folder == str(elsewhere) and spec.script.path == "train.py"
        return {**spec.provenance, "run_id": spec.run_id}

    clean = planned()
    assert clean["script_given"] == "../elsewhere/train.py"
    assert (clean["script_commit"], clean["script_dirty"]) == (_git(elsewhere, "rev-parse", "HEAD"), False)
    (elsewhere / "helper.py").write_text("X = 1\n")             # a module the run copies, in no commit
    untracked = planned()
    assert untracked["script_dirty"] is True and untracked["run_id"] != clean["run_id"]
    (elsewhere / "helper.py").unlink()
    (elsewhere / "NOTES.md").write_text("not copied by a run\n")      # what the run does not copy is not the script's
    assert planned()["script_dirty"] is False

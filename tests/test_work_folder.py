"""A run copies the script's code, not the world (reprokit/kits/contract/work_folder.py), and keeps the plots it saves.

A user runs from the script's own folder with `--state-dir ./state` and their own data (`--data`): the
state folder, a virtualenv and
version control sit beside the script, with a checkpoint the script reads and then overwrites through
torch.save's own C++ writer. Two runs in a row must not copy the state folder into themselves, the
user's checkpoint must stay as it was, the script's arguments arrive split as a shell splits them, and
its plot is kept beside the results.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from checkout import REPO

from reprokit.errors import UserError
from reprokit.kits.contract import work_folder
from reprokit.plan import data_mounts

SCRIPT = '''
import argparse, pathlib
import torch

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--note", default="")
args = p.parse_args()
assert (args.epochs, args.note) == (2, "two words"), args
assert not pathlib.Path(".git").exists() and not pathlib.Path("venv").exists() and not pathlib.Path("state").exists()
assert pathlib.Path("data/labels.txt").read_text() == "the user's own"     # --data's folder, not the copy
weights = pathlib.Path("big.bin")
assert weights.read_bytes()[:4] == b"user"
model = torch.nn.Linear(4, 2)
pathlib.Path("plot.png").write_bytes(b"\\x89PNG made by the script")
torch.save(model.state_dict(), weights)             # overwrites the large file it read: its own copy only
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(args.epochs):
    for i in range(4):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward()
        opt.step()
'''


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / ".git").mkdir(parents=True)
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / "venv" / "lib").mkdir(parents=True)
    (folder / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (folder / "venv" / "lib" / "module.py").write_text("x = 1\n")
    (folder / "train.py").write_text(SCRIPT)
    (folder / "big.bin").write_bytes(b"user" + bytes(1 << 20))
    (folder / "data").mkdir()
    (folder / "data" / "labels.txt").write_text("a stale copy")
    return folder


def test_two_runs_from_the_scripts_folder_copy_the_code_and_leave_the_users_files_as_they_were(kit_python, tmp_path):
    kit_python("pytorch")
    folder = _folder(tmp_path)
    original = (folder / "big.bin").read_bytes()
    mine = tmp_path / "datasets" / "mine"
    mine.mkdir(parents=True)
    (mine / "labels.txt").write_text("the user's own")
    for name in ("first", "second"):                 # the second finds the first's state folder beside the script
        proc = subprocess.run(
            [sys.executable, "-m", "reprokit", "reproduce", "--script", "pytorch=train.py --epochs 2 --note 'two words'",
             "--frameworks", "pytorch", "--backend", "local", "--profile", "quick", "--state-dir", "state",
             "--data-dir", str(tmp_path / "data"), "--reports-dir", "reports", "--name", name, "--offline", "--data", f"pytorch:./data={mine}"],
            cwd=folder, capture_output=True, text=True, timeout=600, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                                                        "HOME": str(Path.home())})
        assert proc.returncode == 0, proc.stdout + proc.stderr
    first, second = (json.loads(p.read_text()) for p in sorted((folder / "state" / "results").glob("*.json")))
    assert first["status"] == second["status"] == "ok", (first.get("failure"), second.get("failure"))
    result = second
    assert (folder / "big.bin").read_bytes() == original
    (figure,) = result["probe"]["figures"]
    assert figure["name"] == "plot.png"
    assert (folder / "state" / "figures" / result["run_id"] / "plot.png").read_bytes() == b"\x89PNG made by the script"
    assert set(result["spec"]["script"]["files"]) == {"train.py"}      # the venv's module is not the script's
    (mount,) = result["spec"]["script"]["mounts"]
    assert (mount["at"], mount["folder"], mount["files"]) == ("./data", str(mine), 1)
    assert any("--data is where the script reads ./data" in s for s in result["probe"]["shims"])


def test_a_folder_that_would_copy_too_much_is_refused_before_any_run(tmp_path):
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "train.py").write_text("print('never runs')\n")
    with open(folder / "images.npy", "wb") as f:      # sparse: no room taken here
        f.truncate(work_folder.COPY_LIMIT_BYTES + (1 << 20))
    proc = subprocess.run([sys.executable, "-m", "reprokit", "reproduce", "--script", f"pytorch={folder / 'train.py'}",
                           "--frameworks", "pytorch", "--backend", "local", "--profile", "quick", "--state-dir",
                           str(tmp_path / "state"), "--data-dir", str(tmp_path / "data"), "--dry-run"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{folder} would copy 1025 MiB into every run's work folder" in proc.stderr
    assert not (tmp_path / "state" / "results").exists()


@pytest.mark.parametrize("given, says", [
    ("pytorch:./data", "is not understood; use --data [FRAMEWORK:]WHERE=FOLDER"),
    ("caffe:./data={folder}", "is not understood"),
    ("/data={folder}", "must be a path relative to the script's folder"),
    ("./data={folder}/absent", "is not a folder; give the folder that holds your data"),
])
def test_a_data_folder_that_cannot_be_shown_is_refused_in_one_sentence(tmp_path, given, says):
    with pytest.raises(UserError, match=re.escape(says)):
        data_mounts.parse([given.format(folder=tmp_path)])
    assert data_mounts.parse([f"../data={tmp_path}"]) == {"": (("../data", tmp_path.resolve()),)}

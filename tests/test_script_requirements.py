"""A script's extra requirements (reprokit/environments/script_requirements.py): hash-pinned, layered on the lock, installed
from wheels the host fetched, with no network in the run.

The package is a real wheel the test builds; pip fetches it from a local folder (PIP_FIND_LINKS, PIP_NO_INDEX),
as a user behind a mirror would, and the probe installs it with the kit environment's own pip.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from reprokit import cli
from reprokit.environments import script_requirements
from reprokit.errors import UserError
from reprokit.results.provenance import REPO

SCRIPTS = Path(__file__).parent / "user_scripts"
NAME, VERSION = "reprokit_probe_extra", "1.0"


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


@pytest.mark.slow
def test_an_extra_requirement_is_installed_from_hash_checked_wheels(kit_python, tmp_path, data_dir, monkeypatch):
    kit_python("pytorch")
    digest = _wheel(tmp_path / "wheels")
    folder = _experiment(tmp_path / "exp", f"# what the script imports beyond torch\n{NAME.replace('_', '-')}=="
                                           f"{VERSION} \\\n    --hash=sha256:{digest}\n{_numpy_pin()}\n")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "wheels")}
    proc = subprocess.run([sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(folder), "--only", "extra",
                           "--frameworks", "pytorch", "--backend", "local", "--profile", "quick", "--state-dir",
                           str(tmp_path / "state"), "--data-dir", str(data_dir), "--reports-dir",
                           str(tmp_path / "reports")], cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (path,) = (tmp_path / "state" / "results").glob("*.json")
    result = json.loads(path.read_text())
    assert result["status"] == "ok", result["failure"]
    req = result["spec"]["script"]["requirements"]
    assert req["in_lock"] == [_numpy_pin().split()[0]] and len(req["install"]) == 1
    assert any(s.startswith("its requirements requirements.txt installed from hash-checked wheels, after the lock's "
                            "packages: reprokit-probe-extra==1.0") for s in result["probe"]["shims"])
    assert result["model"]["parameters"]["total"] == 3 * 32 * 32 * 24 + 24 + 24 * 10 + 10    # its WIDTH, 24
    # the wheel is the one hashed: another wheel under the same name is refused at the download
    (folder / "requirements.txt").write_text(f"{NAME}=={VERSION} --hash=sha256:{'0' * 64}\n")
    spec = {"source": "script", "script": {"path": "torch_extra.py", "requirements": script_requirements.entry(
        folder, "requirements.txt", "pytorch", folder / "extra.toml")}}
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    with pytest.raises(UserError, match="could not be downloaded"):
        script_requirements.fetch([spec], tmp_path / "other-data", log=lambda line: None)


@pytest.mark.parametrize("text, says", [
    ("tqdm>=4\n", "tqdm>=4 is not hash-pinned: every requirement needs == and its --hash=sha256: lines"),
    ("tqdm==4.70.1\n", "tqdm==4.70.1 is not hash-pinned"),
    ("--index-url https://example.org/simple\n", "--index-url is not allowed in a script's requirements"),
    (f"numpy==1.26.4 --hash=sha256:{'a' * 64}\n", "numpy==1.26.4 conflicts with the pytorch lock's numpy=="),
])
def test_a_requirements_file_that_is_not_hash_pinned_or_conflicts_is_refused_before_any_run(tmp_path, capsys, text,
                                                                                              says):
    folder = _experiment(tmp_path / "exp", text)
    code = cli.main(["reproduce", "--experiments", str(folder), "--only", "extra", "--frameworks", "pytorch",
                     "--backend", "local", "--state-dir", str(tmp_path / "state"), "--data-dir", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error: ") == 1 and says in err, err
    assert not (tmp_path / "state" / "results").exists()

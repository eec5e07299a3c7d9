"""The tool installed from its wheel, run in a folder of its own: the wheel and the sdist built from this clone
(`python -m build`, checked with `twine check`), everything the tool reads inside the wheel (tests/wheel_contents.py),
and the installed package, outside the clone, doing from an empty folder what the clone does: its version, the
doctor, the seeds' default plan, a script run to its report; with the same code hash, commit, lock hashes and image
tags as the clone's. The wheel is installed without its dependencies into a folder of its own that comes first on
the path (those of this environment serve it); .ci/run installs it, with them, into a fresh virtualenv."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import wheel_contents
from checkout import REPO

# What a process prints of the kit's identity, its images and its environments: the same from the clone and the wheel.
IDENTITY = """
import hashlib, json
from reprokit.environments import base_images, envs, images
from reprokit.results import provenance
out = {"code": provenance.code_info(), "builds": {}}
for fw, entry in base_images.load_bases().items():
    for flavor in entry["locks"]:
        r = images.recipe(fw, flavor)
        context = images._context(r, base_images.REPO_ROOT, None).getvalue()
        out["builds"][f"{fw}-{flavor}"] = [r.tag, hashlib.sha256(context).hexdigest(),
                                           envs.env_dir(envs.ENVS, envs.lock_name(fw, flavor)).name]
print(json.dumps(out, sort_keys=True))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sdist and the wheel of this clone (the wheel built from the sdist, as pip builds a download), and what
    the clone itself says of its identity at that moment."""
    dist = tmp_path_factory.mktemp("dist")
    clone = _identity({"PYTHONPATH": str(REPO)}, REPO)
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(REPO)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    return wheel, sdist, clone


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory):
    """The wheel installed into a folder of its own: the environment of a process that runs it, outside the clone."""
    target = tmp_path_factory.mktemp("installed")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(built[0])], check=True, capture_output=True, timeout=300)
    return {**os.environ, "PYTHONPATH": str(target)}, target


def _identity(env: dict[str, str], cwd: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", IDENTITY], cwd=cwd, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _reprokit(env: dict[str, str], cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reprokit", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_wheel_and_the_sdist_pass_twine_and_hold_every_file_the_tool_reads(built):
    wheel, sdist, _ = built
    check = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    must = wheel_contents.must_hold()
    assert {"reprokit/_resources/locks/versions.toml", "reprokit/_resources/docker/bases.toml",
            "reprokit/_resources/claims/seeds.toml", "reprokit/schemas/result.schema.json",
            "reprokit/kits/experiments/vgg16_cifar10_speed.toml", "reprokit/kits/experiments/seed000/train_torch.py"} <= set(must)
    assert wheel_contents.missing(wheel) == []
    with zipfile.ZipFile(wheel) as z:
        tops = {name.split("/")[0] for name in z.namelist()}
    assert tops == {"reprokit", f"{wheel.name.split('-py3')[0]}.dist-info"}     # one package: a project's kits/ is its own


def test_a_wheel_that_lacks_one_of_its_resources_fails_the_list(built, tmp_path):
    """A wheel built without docker/bases.toml is named for it, file by file, before anyone installs it."""
    wheel = built[0]
    lacking = tmp_path / wheel.name
    gone = "reprokit/_resources/docker/bases.toml"
    with zipfile.ZipFile(wheel) as whole, zipfile.ZipFile(lacking, "w") as cut:
        for item in whole.infolist():
            if item.filename != gone:
                cut.writestr(item, whole.read(item))
    assert wheel_contents.missing(lacking) == [gone]
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "wheel_contents.py"), str(lacking)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr == f"{lacking} lacks {gone}\n"


def test_the_clone_and_its_wheel_have_one_code_hash_commit_lock_hashes_and_image_tags(built, installed, tmp_path):
    """sha256 over the installed kit packages' files, the commit the build recorded, each lock's environment folder
    and each image's tag and build context: byte for byte what the clone gives."""
    env, target = installed
    mine = _identity(env, tmp_path)
    assert mine == built[2]
    assert mine["code"]["kit_version"] and len(mine["code"]["code_sha256"]) == 64


@pytest.mark.slow                # a script trains for a few steps
def test_the_installed_tool_runs_from_an_empty_folder_as_the_clone_does(built, installed, tmp_path):
    env, target = installed
    here = tmp_path / "project"
    here.mkdir()
    first = f"state: {here}/.reprokit  reports: {here}/reprokit-reports"

    version = _reprokit(env, here, "--version")
    assert version.returncode == 0 and version.stdout.startswith("reprokit ") and f"installed in {target}" in \
        version.stdout, version.stdout + version.stderr
    doctor = _reprokit(env, here, "doctor")
    assert doctor.returncode == 0 and doctor.stdout.splitlines()[0] == first, doctor.stdout + doctor.stderr
    assert "a run can start here" in doctor.stdout

    # the seeds' default plan, as `nox -s reproduce -- --dry-run` plans it in the clone
    dry = _reprokit(env, here, "reproduce", "--dry-run", "--backend", "local")
    clone = _reprokit({**os.environ, "PYTHONPATH": str(REPO)}, REPO, "reproduce", "--dry-run", "--backend", "local",
                      "--reports-dir", "reports", "--state-dir", str(tmp_path / "clone-state"))
    assert dry.returncode == 0 and clone.returncode == 0, dry.stderr[-2000:] + clone.stderr[-2000:]
    assert dry.stdout.splitlines()[0] == first
    assert clone.stdout.splitlines()[0] == f"state: {tmp_path}/clone-state  reports: {REPO}/reports"
    assert dry.stdout.split("\nplan: ")[1] == clone.stdout.split("\nplan: ")[1]
    assert sorted(p.name for p in here.iterdir()) == []          # a dry run writes nothing where it runs

    # a script of the project, run by the installed kit to its report
    shutil.copy(REPO / "tests" / "user_scripts" / "torch_fixed.py", here / "train.py")
    run = _reprokit(env, here, "reproduce", "--script", "pytorch=train.py", "--backend", "local", "--profile", "quick",
                    "--name", "mine", timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.splitlines()[0] == first and "report: reprokit-reports/mine/report.md" in run.stdout
    (result,) = (here / "reprokit-reports" / "mine" / "results").glob("*.json")
    provenance = json.loads(result.read_text())["provenance"]
    assert provenance["code_sha256"] == built[2]["code"]["code_sha256"] and provenance["script_given"] == "train.py"
    assert provenance["lock"] == "locks/pytorch.txt"
    # its kit process imported the kits from their copy in the cache, never from the folder holding the host's
    # packages: reprokit/__init__.py and reprokit/kits/ alone
    where = subprocess.run([sys.executable, "-c", "from reprokit.runners.local import kit_path; print(kit_path())"],
                           cwd=here, env=env, capture_output=True, text=True, timeout=60).stdout.strip()
    assert Path(where).parent.name == "kit-code" and sorted(p.name for p in Path(where).iterdir()) == ["reprokit"]
    copied = sorted(p.name for p in (Path(where) / "reprokit").iterdir() if p.name != "__pycache__")
    assert copied == ["__init__.py", "kits"]

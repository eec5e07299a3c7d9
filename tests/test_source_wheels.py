"""A dependency that publishes only its source archive (reprokit/environments/source_wheels.py), as TFDS's
``promise`` does: resolution builds it into a wheel once and goes on, where the build is pure Python; a build
for this host only is refused in one sentence. The packages are real: a wheel that depends on a package whose
only release is an sdist with an in-tree build backend, served by pip from a local folder (PIP_FIND_LINKS,
PIP_NO_INDEX), as a user behind a mirror has them.
"""
from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from reprokit.environments import script_packages, source_wheels
from reprokit.errors import UserError

# a PEP 517 backend of its own: the sdist builds without setuptools or the index
BACKEND = '''
import zipfile
NAME, VERSION, TAG = "{name}", "1.0", "{tag}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    info = f"{{NAME}}-{{VERSION}}.dist-info"
    files = {{f"{{NAME}}/__init__.py": "ANSWER = 42\\n",
              f"{{info}}/METADATA": f"Metadata-Version: 2.1\\nName: {{NAME}}\\nVersion: {{VERSION}}\\n",
              f"{{info}}/WHEEL": f"Wheel-Version: 1.0\\nGenerator: tests\\nRoot-Is-Purelib: true\\nTag: {{TAG}}\\n"}}
    files[f"{{info}}/RECORD"] = "".join(f"{{n}},,\\n" for n in files) + f"{{info}}/RECORD,,\\n"
    name = f"{{NAME}}-{{VERSION}}-{{TAG}}.whl"
    with zipfile.ZipFile(f"{{wheel_directory}}/{{name}}", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return name
'''


def _sdist(folder: Path, name: str, tag: str) -> None:
    """name-1.0.tar.gz: its only release, source that builds a wheel tagged ``tag``."""
    members = {"pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
               "backend.py": BACKEND.format(name=name, tag=tag),
               "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"}
    with tarfile.open(folder / f"{name}-1.0.tar.gz", "w:gz") as tar:
        for member, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-1.0/{member}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _wheel_needing(folder: Path, name: str, dependency: str) -> None:
    """name-1.0-py3-none-any.whl, which requires ``dependency``."""
    info = f"{name}-1.0.dist-info"
    files = {f"{name}/__init__.py": "",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nRequires-Dist: {dependency}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


@pytest.fixture
def index(tmp_path, monkeypatch) -> Path:
    """A package folder pip reads instead of the index, and a cache of this test's own."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("REPROKIT_CACHE", str(tmp_path / "cache"))
    return folder


def test_a_dependency_with_only_its_source_is_built_once_into_a_pure_wheel(index):
    _sdist(index, "sourceonly", "py3-none-any")
    _wheel_needing(index, "needs_source", "sourceonly")
    lines: list[str] = []
    install = script_packages.resolve(["needs-source"], {}, [], "pytorch", "requirements.txt", log=lines.append)
    assert [line.split(" --hash")[0] for line in install] == ["needs-source==1.0", "sourceonly==1.0"]
    assert ("requirements: sourceonly publishes no wheel for Python 3.11 on Linux x86_64; building one from its "
            "source, once per machine") in lines
    built = source_wheels.folder() / "sourceonly-1.0-py3-none-any.whl"
    assert built.is_file()
    # its hash is the built wheel's own bytes, which the runs' download reads from the same folder
    assert install[1].endswith(script_packages.hashlib.sha256(built.read_bytes()).hexdigest())


def test_a_source_that_builds_for_this_host_only_is_refused_in_one_sentence(index):
    _sdist(index, "hostonly", "cp311-cp311-linux_x86_64")
    _wheel_needing(index, "needs_host", "hostonly")
    with pytest.raises(UserError) as refused:
        script_packages.resolve(["needs-host"], {}, [], "pytorch", "requirements.txt", log=lambda line: None)
    assert str(refused.value) == (
        "hostonly, which the requirements need, publishes no wheel for Python 3.11 on Linux x86_64, and its source "
        "builds one for this host only (hostonly-1.0-cp311-cp311-linux_x86_64.whl); give a wheel of it for Python "
        "3.11 on Linux x86_64 with PIP_FIND_LINKS.")
    assert not list(source_wheels.folder().glob("*.whl"))

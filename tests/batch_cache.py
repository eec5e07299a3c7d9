"""The suite's certificate batches (tests/certified.py), kept in the per-user cache by what they read.

A batch costs minutes, and is a function of the project's files and the test data its processes read, the kit
environments (each a function of its lock file), the host's packages and this machine. Its processes record
what they read (tests/read_record/sitecustomize.py): every module they load and every file they open. An entry
is reused while each file it read is unchanged, as ccache's direct mode and pytest-testmon decide; a change
to any of them, or a new environment, makes the batch again, for real. Two entries per batch are kept.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from checkout import REPO

from reprokit.environments import envs
from reprokit.kits.contract.names import FRAMEWORKS

RECORD_ENV = "REPROKIT_SUITE_RECORD"
RECORDER = Path(__file__).with_name("read_record")
KEPT = 2
DATA = "DATA/"                            # a manifest's key of a file under the test data's folder
# Not copied into an entry: the batch's lock, its log and what its processes recorded.
_OWN = ("batch.lock", "batch.log", "read")
_SOURCES = (REPO, REPO / "tests")        # where a recorded module's file is looked for
# This module and the recorder decide whether a batch is made again, not what it computes: not keys of an entry.
_DECIDES = {Path(__file__).resolve(), (RECORDER / "sitecustomize.py").resolve()}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _context(batch: str) -> dict:
    """What a batch's numbers rest on besides the project's files: the kit environments (their names hold
    their lock's hash), the host's packages, the interpreter and the machine."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    # the interpreter's own packages, not what sys.path happens to hold (pytest puts the checkout on it)
    site = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    host = sorted({f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions(path=site)})
    return {"batch": batch, "envs": sorted(envs.env_dir(envs.ENVS, envs.lock_name(fw, "cpu")).name
                                           for fw in FRAMEWORKS),
            "host_packages": hashlib.sha256("\n".join(host).encode()).hexdigest(), "python": sys.version,
            "cpu": cpu, "cpus": len(os.sched_getaffinity(0))}


def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    for base in _SOURCES:
        for path in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
            if path.is_file():
                return path
    return None


def _project_file(path: Path, root: Path) -> bool:
    """A file of the project's own: not the batch's output, a compiled module or a tool's folder (.nox's host
    packages are in the context)."""
    if not path.is_file() or not path.is_relative_to(REPO) or path.is_relative_to(root):
        return False
    parts = path.relative_to(REPO).parts
    return not any(part.startswith(".") or part == "__pycache__" or part.endswith(".egg-info") for part in parts)


def _read(record: Path, root: Path, data_dir: Path) -> dict[str, str]:
    """The project's files and the test data's files the batch's processes read, with their sha256: a project
    file by its path under the repository, a data file by its path under the data folder after DATA."""
    files: set[Path] = set()
    for log in record.glob("*.txt"):
        for line in log.read_text().splitlines():
            event, _, what = line.partition(" ")
            path = _module_file(what) if event == "import" else Path(what)
            if path is not None and path.parent.name == "__pycache__" and path.suffix == ".pyc":
                # a module read from its cached bytecode (Python opens no source then): the source it was made from
                path = path.parent.parent / f"{path.name.split('.')[0]}.py"
            # a copy of a test module (a control pair's builders) is read from the batch's own folder
            if path is not None and path.is_relative_to(root) and (REPO / "tests" / path.name).is_file():
                path = REPO / "tests" / path.name
            if path is not None and path not in _DECIDES and (
                    _project_file(path, root) or path.is_relative_to(data_dir) and path.is_file()):
                files.add(path)
    return {_key(p, data_dir): _sha256(p) for p in sorted(files)}


def _key(path: Path, data_dir: Path) -> str:
    return DATA + str(path.relative_to(data_dir)) if path.is_relative_to(data_dir) else str(path.relative_to(REPO))


def _file(key: str, data_dir: Path) -> Path:
    return data_dir / key.removeprefix(DATA) if key.startswith(DATA) else REPO / key


def _folder(batch: str) -> Path:
    # the user's cache, which holds the environments: the suite points REPROKIT_CACHE at a cache of its own
    return envs.ENVS.resolve().parent / "suite-batches" / batch


def _entries(batch: str) -> list[Path]:
    folder = _folder(batch)
    return sorted(folder.glob("*/manifest.json"), key=lambda p: p.stat().st_mtime, reverse=True) \
        if folder.is_dir() else []


def _unchanged(manifest: dict, batch: str, data_dir: Path) -> bool:
    if manifest["context"] != _context(batch):
        return False
    return all(_same(key, sha, data_dir) for key, sha in manifest["files"].items()
               if _file(key, data_dir) not in _DECIDES)


def _same(key: str, sha: str, data_dir: Path) -> bool:
    path = _file(key, data_dir)
    if key.startswith(DATA) and not path.exists():
        # test data the batch made itself (the plan writes a stand-in where it is missing), from code that is
        # among the entry's files: a new session's data folder starts empty
        return True
    return path.is_file() and _sha256(path) == sha


def lookup(batch: str, root: Path, out: Path, data_dir: Path) -> bool:
    """Copy into ``root`` an entry whose reads are all unchanged, with ``out`` naming ``root``; whether one was."""
    for path in _entries(batch):
        manifest = json.loads(path.read_text())
        if not _unchanged(manifest, batch, data_dir):
            continue
        shutil.copytree(path.parent / "root", root, dirs_exist_ok=True)
        out.write_text((root / out.name).read_text().replace(manifest["root"], str(root)))
        path.touch()                            # last used: pruned last
        return True
    return False


def store(batch: str, root: Path, out: Path, record: Path, data_dir: Path) -> None:
    """Keep the batch just made in ``root`` with the files its processes read, unless a certificate of it
    ended in an error (which a busy machine's timeout may cause: made again next time); prune to KEPT entries."""
    if any(result["status"] == "error" for result in json.loads(out.read_text())["results"].values()):
        return
    manifest = {"context": _context(batch), "files": _read(record, root, data_dir), "root": str(root)}
    folder = _folder(batch)
    folder.mkdir(parents=True, exist_ok=True)
    entry = Path(tempfile.mkdtemp(dir=folder, prefix=".new-"))
    shutil.copytree(root, entry / "root", ignore=lambda d, names: _OWN if Path(d) == root else ())
    (entry / "manifest.json").write_text(json.dumps(manifest, indent=1))
    try:
        entry.rename(folder / hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:16])
    except OSError:                             # the same entry is there already
        shutil.rmtree(entry, ignore_errors=True)
    for old in _entries(batch)[KEPT:]:
        shutil.rmtree(old.parent, ignore_errors=True)

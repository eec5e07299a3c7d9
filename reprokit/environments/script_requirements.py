"""A script's extra requirements: what it imports beyond its framework's lock, installed from fetched wheels.

A script names them in a requirements.txt beside it, in the file an experiment names
(``requirements = "requirements.txt"`` in [scripts]), or on the command line (``--require
pytorch=matplotlib``, which replaces the file's list). A line names a package, with a version range or
without; an option, a URL or a repository is refused, one sentence each, before any run. A line for a
package of the framework's lock is left to the lock, and where it asks for another version it is set
aside in one sentence (the script runs on the libraries the kit measured). The rest is resolved against
the lock into hash-pinned lines (reprokit/environments/script_packages.py); a file whose every line is
pinned with ``==`` and its ``--hash`` lines, as ``pip-compile --generate-hashes`` writes it, is taken as
written. Those lines are the spec's ``install`` list, in the run id. Before any run the host downloads
their wheels (``pip download --require-hashes --no-deps``, for the images' Python and platform) into the
per-user cache, one file per wheel shared by every set, and installs the set once per machine into a
read-only folder there, which every run of it reads (reprokit/environments/requirement_sets.py): no run
installs anything, and none has a network.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from reprokit.environments import base_images, envs, import_scan, module_names, requirement_sets, script_packages
from reprokit.errors import UserError
from reprokit.results.provenance import sha256_file

BESIDE = "requirements.txt"        # read beside a script whose entry names no file
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;]+)")
_HASH = "--hash=sha256:"


@dataclass(frozen=True)
class Source:
    """Where a script's requirement lines come from: a file in its folder, or --require."""
    name: str                      # the spec's ``file``: the file relative to the folder, or the flag as given
    where: str                     # how a sentence names it
    lines: tuple[str, ...]
    sha256: str


def from_file(folder: Path, relative: str) -> Source:
    path = folder / relative
    return Source(relative, str(path), tuple(_logical_lines(path.read_text())), sha256_file(path))


def from_flag(framework: str, names: tuple[str, ...]) -> Source:
    flag = f"--require {framework}={','.join(names)}"
    return Source(flag, f"--require {framework}", names, hashlib.sha256("\n".join(names).encode()).hexdigest())


def _logical_lines(text: str) -> list[str]:
    """The requirement lines, continuations joined, comments and blank lines left out."""
    out, current = [], ""
    for raw in text.splitlines():
        line = "" if raw.lstrip().startswith("#") else raw.split(" #")[0].strip()
        if not line:
            continue
        current = f"{current} {line.rstrip(chr(92)).strip()}".strip()
        if not line.endswith("\\"):
            out.append(current)
            current = ""
    return out + ([current] if current else [])


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> list[tuple[str, str, str]]:
    """(name, version, line) of each requirement of a lock file."""
    return [(_name(m.group(1)), m.group(3), line) for line in _logical_lines(path.read_text())
            if (m := _PIN.match(line))]


def _lock_files(framework: str) -> list[Path]:
    locks = base_images.load_bases()[framework]["locks"].values()
    return [envs.lock_path(Path(lock).stem) for lock in dict.fromkeys(locks)]


def locked(framework: str) -> dict[str, str]:
    """Every package each lock of the framework pins, by name: version (the first lock's where they differ)."""
    out: dict[str, str] = {}
    for lock in _lock_files(framework):
        for name, version, _ in pins(lock):
            out.setdefault(name, version)
    return out


def _parsed(line: str, where: str) -> Requirement | str:
    """The line's requirement (its --hash options aside), or the sentence that refuses it."""
    if line.startswith("-"):
        return (f"{where}: {line.split()[0].split('=')[0]} is not allowed in a script's requirements; name each "
                f"package (a version range is optional), and give wheels of your own with PIP_FIND_LINKS.")
    text = line.split(" --hash")[0].strip()
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return (f"{where}: {text} is not a package name with an optional version range (a URL, a path or a "
                f"repository is not on an index); name a released package, or give its wheel with PIP_FIND_LINKS.")
    if req.url:
        return (f"{where}: {text} names {req.url}, which is not on an index; name a released package, or give its "
                f"wheel with PIP_FIND_LINKS.")
    return req


def settle(source: Source, framework: str, log: Callable[[str], object] = print) -> dict[str, Any] | None:
    """The spec's requirements of a script (its file, sha256, the hash-pinned lines to install, and what the
    lock decides), or None where it has none; a line that cannot be installed is refused before any run."""
    parsed = [(line, _parsed(line, source.where)) for line in source.lines]
    refused = [why for _, why in parsed if isinstance(why, str)]
    if refused:
        raise UserError("\n".join(refused))
    if not parsed:
        return None
    lock = locked(framework)
    in_lock, rest = [], []
    for line, req in parsed:
        assert isinstance(req, Requirement)
        name, text = _name(req.name), line.split(" --hash")[0].strip()
        if name not in lock:
            rest.append(line)
        elif req.specifier.contains(lock[name], prereleases=True):
            in_lock.append(f"{name}=={lock[name]}")
        else:
            log(f"{source.where}: {text} is set aside: the {framework} lock's {name}=={lock[name]} decides (the "
                f"kit measures the lock's libraries).")
            in_lock.append(f"{text} (set aside for the lock's {name}=={lock[name]})")
    if rest and all(_PIN.match(line) and _HASH in line for line in rest):
        install = rest                                 # pinned with hashes: taken as written
    elif rest:
        install = script_packages.resolve([line.split(" --hash")[0].strip() for line in rest], lock,
                                          [sha256_file(p) for p in _lock_files(framework)], framework,
                                          source.where, log)
    else:
        install = []
    return {"file": source.name, "sha256": source.sha256, "install": install, "in_lock": in_lock}


def check_imports(folder: Path, scripts: list[str], framework: str, source: Source | None,
                  requirements: dict[str, Any] | None, facts: dict[str, Any]) -> None:
    """Before any run: the script's extra wheels fetched, and each module it imports that its environment lacks
    refused (reprokit/environments/import_scan.py), with the way to add it. ``facts``: the runner's description
    of the framework's runs (its interpreter, or its lock, whose local environment answers for Docker's too)."""
    install = (requirements or {}).get("install") or []
    fetched = requirement_sets.wheels_of(install, facts, scripts[0]) if install else []
    provided = script_packages.provided(fetched)
    if fetched and source:      # the index's code never stands in for the script's own modules
        import_scan.shadowing(fetched, import_scan.own_modules(folder, scripts[0]), source.where)

    def python() -> Path:
        if facts.get("interpreter"):
            return Path(facts["interpreter"])
        name = Path(facts["lock"]).stem if facts.get("lock") else envs.lock_name(framework, "cpu")
        return envs.build(envs.ENVS, name)

    def way_out(module: str) -> str:          # the distribution that provides it, each name of the flag once
        named = None if source is None else source.name if source.name.startswith("--require") else source.where
        return module_names.way_out(framework, module, named)
    import_scan.check(folder, scripts, framework, locked(framework), provided, python, way_out)


"""A script's unpinned requirement lines resolved into hash-pinned ones, and what their wheels provide.

pip's own resolver takes the lines with every package of the framework's locks as a constraint, for the
images' Python and platform (``pip install --dry-run --report``: it reads the index, installs nothing).
Of what it picks, the lock's packages are left to the lock; the rest, each ``name==version --hash``, is
what the probe installs. The set is a pure function of the lines, the locks and the platform, so it is
kept in the per-user cache (reprokit/environments/cache.py) under a key of those: the index is read once.
A line pip cannot satisfy is refused in one sentence, each one found (pip names one at a time). A dependency
that publishes only its source, pure Python, is built into a wheel once (reprokit/environments/source_wheels.py).
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from reprokit.environments import cache, source_wheels
from reprokit.errors import UserError
from reprokit.kits.contract.files import write_text_atomic

PYTHON_VERSION = "3.11"            # the images' Python (docker/*.Dockerfile) and the locks'
# every manylinux tag the images' glibc 2.28 runs: given --platform, pip takes only the tags named (torch's own
# dependencies, nvidia-cudnn-cu13 among them, publish manylinux_2_27 wheels)
PLATFORMS = (*(f"manylinux_2_{minor}_x86_64" for minor in range(28, 4, -1)), "manylinux2014_x86_64",
             "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64")
WHERE = f"Python {PYTHON_VERSION} on Linux x86_64"
# the options that make pip choose wheels for the images, not for this host
TARGET = ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp",
          *[f"--platform={p}" for p in PLATFORMS]]
RESOLVED = "script-packages"       # the cache's folder of resolved sets, <key>.json
# what a package imports without declaring it, added wherever the resolved set holds it: TFDS's builders read
# their checksums through importlib_resources (TFDS 4.9 declares it for Python < 3.9 only; the TensorFlow locks
# name it for the same reason, locks/versions.toml)
UNDECLARED = {"tensorflow-datasets": "importlib-resources"}
_NOT_FOUND = re.compile(r"Could not find a version that satisfies the requirement (\S+) \(from versions: ([^)]*)\)")


def resolve(lines: list[str], locked: dict[str, str], lock_hashes: list[str], framework: str, where: str,
            log: Callable[[str], object] = print) -> list[str]:
    """The hash-pinned lines that install ``lines`` beside the lock (``locked``: name -> version), from the
    per-user cache where this set was resolved before."""
    key = hashlib.sha256(json.dumps({"lines": lines, "locks": lock_hashes, "python": PYTHON_VERSION,
                                     "platforms": PLATFORMS,
                                     "undeclared": UNDECLARED}).encode()).hexdigest()[:16]
    path = cache.root() / RESOLVED / f"{key}.json"
    try:
        install: list[str] = json.loads(path.read_text())["install"]
        return install
    except (OSError, ValueError, KeyError, TypeError):
        pass                                   # not resolved yet (or a damaged file): resolved again
    log(f"requirements: resolving {', '.join(lines)} against the {framework} lock for {WHERE}")
    wanted, refused = list(lines), []
    with tempfile.TemporaryDirectory(prefix="reprokit-resolve-") as scratch:
        while True:
            report, error = _pip(wanted, locked, Path(scratch))
            if report is not None:
                if missing := _undeclared(report, wanted, locked):
                    log(f"requirements: added {', '.join(missing)}, which the packages picked import undeclared")
                    wanted += missing
                    continue
                break
            needed = [n for n in source_wheels.dependencies_named(error) if n not in locked]
            if source_wheels.build_missing(needed, Path(scratch) / "constraints.txt", TARGET, WHERE, log):
                continue                       # a dependency that publishes only its source, now a wheel
            bad, sentence = _refusal(error, wanted, where, framework)
            refused.append(sentence)
            if bad is None:
                break
            wanted.remove(bad)                 # the others may hold another line pip cannot satisfy
            if not wanted:
                break
    if refused:
        raise UserError("\n".join(refused))
    install = _pinned(report or {}, locked)
    write_text_atomic(path, json.dumps({"lines": lines, "install": install}, indent=1) + "\n")
    return install


def _undeclared(report: dict[str, Any], wanted: list[str], locked: dict[str, str]) -> list[str]:
    """The undeclared imports (``UNDECLARED``) of the packages pip picked that neither it, the lines nor the lock
    hold."""
    picked = {canonicalize_name(item["metadata"]["name"]) for item in report.get("install", [])}
    named = {canonicalize_name(Requirement(line).name) for line in wanted}
    return sorted({need for package, need in UNDECLARED.items() if package in picked} - picked - named - set(locked))


def _pip(lines: list[str], locked: dict[str, str], scratch: Path) -> tuple[dict[str, Any] | None, str]:
    """pip's report of what it would install for the lines, or None and its error lines."""
    (scratch / "requirements.txt").write_text("\n".join(lines) + "\n")
    (scratch / "constraints.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(locked.items())))
    report = scratch / "report.json"
    report.unlink(missing_ok=True)
    # not --quiet: pip names a conflict's dependencies on its standard output only
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--disable-pip-version-check",
           "--report", str(report), *TARGET, *source_wheels.find_links(), "--target", str(scratch / "target"),
           "-c", str(scratch / "constraints.txt"), "-r", str(scratch / "requirements.txt")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not report.is_file():
        return None, proc.stderr + proc.stdout
    return json.loads(report.read_text()), ""


def _refusal(error: str, lines: list[str], where: str, framework: str) -> tuple[str | None, str]:
    """The line pip could not satisfy and the sentence that refuses it; (None, a sentence for them all) where
    pip names none of them."""
    found = _NOT_FOUND.search(error)
    named = canonicalize_name(Requirement(found.group(1)).name) if found else None
    line = next((li for li in lines if canonicalize_name(Requirement(li).name) == named), None)
    if found and line:
        versions = [v.strip() for v in found.group(2).split(",") if v.strip() and v.strip() != "none"]
        if not versions:
            return line, (f"{where}: {line} cannot be installed: pip finds no wheel of it for {WHERE}; name a "
                          f"package that publishes one, or give its wheel with PIP_FIND_LINKS.")
        return line, (f"{where}: {line} cannot be installed: no release for {WHERE} matches it (the newest: "
                      f"{', '.join(versions[-3:])}); name one of those, or leave the version out.")
    errors = [li.removeprefix("ERROR: ") for li in error.splitlines() if li.startswith("ERROR:")]
    why = errors[0] if errors else (error.strip().splitlines() or ["no output"])[-1]
    return None, (f"{where}: {', '.join(lines)} cannot be resolved beside the {framework} lock for {WHERE} "
                  f"(pip: {why}); loosen the line that conflicts, or reach the package index (PyPI) once.")


def _pinned(report: dict[str, Any], locked: dict[str, str]) -> list[str]:
    """``name==version --hash=sha256:...`` of each package pip picked that the lock does not hold."""
    out = []
    for item in report.get("install", []):
        name = canonicalize_name(item["metadata"]["name"])
        if name in locked:
            continue
        info = item["download_info"]
        digest = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        if digest is None and info["url"].startswith("file:"):     # a wheel of PIP_FIND_LINKS: its own bytes
            digest = hashlib.sha256(Path(unquote(urlparse(info["url"]).path)).read_bytes()).hexdigest()
        out.append(f"{name}=={item['metadata']['version']} --hash=sha256:{digest}")
    return sorted(out)


def provided(wheels: Iterable[Path]) -> set[str]:
    """The top-level modules the wheels install (their packages and single-file modules)."""
    names = set()
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                head, _, rest = member.partition("/")
                if not head.endswith((".dist-info", ".data")):
                    names.add(head if rest else head.split(".")[0])    # foo/..., foo.py, foo.cpython-311-....so
    return names

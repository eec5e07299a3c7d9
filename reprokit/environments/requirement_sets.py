"""A script's extra requirements, kept once per machine in the per-user cache (reprokit/environments/cache.py).

Their wheels live in ``wheels/``, one file per wheel under its own name, as pip's cache keeps them, shared by
every requirement set and every clone. Each arrives through ``pip download --require-hashes`` (the lines are
hash-pinned), and a wheel already there whose sha256 its line names is never downloaded again, whichever set
asked for it first. The download goes through pip with the configuration the kit environments were built with
(the machine's find-links and indexes, pip's own HTTP cache where the index lets it keep wheels), so a wheel a kit
lock pins (torch's, in a JAX run) is read where that build read it.

Each set of lines is installed once, before any run, into ``requirement-sets/<lock>-<key>/``; the key covers the
lines, the lock they were resolved beside (or the given interpreter) and the images' Python. The framework
environment's interpreter installs it from the cached wheels alone (no index, hashes checked, compiled once); a
package another set holds from the same wheel is linked from there instead, not installed twice. The install is
checked (each line's package is there), then made read-only. Every run of the set, its certificate
side and its container read that folder: the runner gives it to the probe as a read-only input
(reprokit/runners/base.py), which puts it on sys.path after the lock's packages. No run installs anything. One
command installs a set while others wait for it, as the kit environments are built (envs.py).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from reprokit.environments import cache, envs, source_wheels
from reprokit.environments.script_packages import PYTHON_VERSION, TARGET
from reprokit.errors import UserError
from reprokit.kits.contract.files import write_text_atomic
from reprokit.kits.framework_free.data import REQUIREMENTS_INSTALLED
from reprokit.locking import Lock

WHEELS = "wheels"                  # the cache's folder of wheels: <wheel file name>
SETS = "requirement-sets"          # the cache's folder of installed sets: <lock>-<key>/
LAST_USED = envs.LAST_USED         # touched whenever a command uses a set (a wheel's access time, whenever one is
                                   # read): `reprokit cache prune` reads their age
Log = Callable[[str], object]


def wheels_folder() -> Path:
    return cache.root() / WHEELS


def sets_folder() -> Path:
    return cache.root() / SETS


def wheels_lock() -> Lock:
    """Held while wheels arrive in the cache (and while prune removes some): one download of each."""
    return Lock(cache.root() / f"{WHEELS}.lock", f"the wheel cache {wheels_folder()}")


def set_lock(target: Path) -> Lock:
    """Held while a set is installed (and while prune removes it), beside its folder."""
    return Lock(target.with_name(target.name + ".lock"), f"the requirement set {target}")


def _pinned(line: str) -> tuple[str, Version, set[str]]:
    """A hash-pinned line's package (canonical name), version and sha256 digests."""
    req = Requirement(line.split(" --hash")[0].strip())
    version = next(iter(req.specifier)).version
    return canonicalize_name(req.name), Version(version), {
        part.split(":", 1)[1] for part in line.split() if part.startswith("--hash=sha256:")}


def _cached(line: str) -> Path | None:
    """The cached wheel of the line: its package and version, a sha256 the line names (read, not trusted)."""
    name, version, digests = _pinned(line)
    for path in sorted(wheels_folder().glob("*.whl")):
        found, found_version, _, _ = parse_wheel_filename(path.name)
        if found == name and found_version == version:
            st = path.stat()
            if _sha256(str(path), st.st_size, st.st_mtime_ns) in digests:
                return path
    return None


@functools.cache
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """A wheel's sha256, read once per command while the file stays as it was (its size and time are the key: the
    plan's import check and the install before the runs both ask, and a wheel is hundreds of megabytes)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def wheels(install: list[str], script: str, log: Log = print) -> list[Path]:
    """The cached wheel of each line, those not cached yet downloaded first (pip checks their hashes)."""
    folder = wheels_folder()
    folder.mkdir(parents=True, exist_ok=True)
    lock = wheels_lock()
    lock.acquire(log)
    try:
        found = {line: _cached(line) for line in install}
        missing = [line for line, path in found.items() if path is None]
        if missing:
            kept = f" ({len(install) - len(missing)} already there)" if len(missing) < len(install) else ""
            log(f"requirements: downloading {len(missing)} wheel(s) for {script} into {folder}{kept}")
            _download(missing, folder, script)
            found.update({line: _cached(line) for line in missing})
    finally:
        lock.release()
    lost = [line.split()[0] for line, path in found.items() if path is None]
    if lost:
        raise UserError(f"the wheels pip downloaded for {script} hold no wheel of {', '.join(lost)} with the hash its "
                        f"line names; give that wheel with PIP_FIND_LINKS.")
    paths = [path for path in found.values() if path is not None]
    for path in paths:                # read now: its access time, which prune reads (its content's time stays)
        with contextlib.suppress(OSError):
            os.utime(path, ns=(time.time_ns(), path.stat().st_mtime_ns))
    return paths


def _download(lines: list[str], folder: Path, script: str) -> None:
    """The lines' wheels into the cache's folder, each moved there whole once pip has checked its hash."""
    with tempfile.TemporaryDirectory(prefix=f"{WHEELS}.", dir=folder.parent) as scratch:
        listed = Path(scratch) / "requirements.txt"
        listed.write_text("\n".join(lines) + "\n")
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--require-hashes", "--no-deps",
                               "--disable-pip-version-check", *TARGET, *source_wheels.find_links(),
                               "--dest", str(Path(scratch) / "got"), "-r", str(listed)], capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise UserError(f"the extra requirements of {script} could not be downloaded ({tail}); "
                            f"reach PyPI once (runs never do), or point pip at your wheels with PIP_FIND_LINKS")
        for wheel in (Path(scratch) / "got").glob("*.whl"):
            wheel.chmod(0o444)
            os.replace(wheel, folder / wheel.name)


def folder_for(install: list[str], facts: dict[str, Any]) -> Path:
    """The set's folder: its lines, the lock they were resolved beside (or the given interpreter) and the images'
    Python. ``facts``: a spec's provenance, or a runner's description (lock, lock_sha256, interpreter)."""
    lock = facts.get("lock")
    body = {"install": install, "lock_sha256": facts.get("lock_sha256"), "python": PYTHON_VERSION,
            "interpreter": None if lock else facts.get("interpreter")}
    key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    return sets_folder() / f"{Path(lock).stem if lock else 'python'}-{key}"


def for_spec(spec: dict[str, Any]) -> Path | None:
    """The installed set a script spec's runs read, None where it has no extra lines to install."""
    install = (spec.get("script", {}).get("requirements") or {}).get("install")
    return folder_for(install, spec["provenance"]) if install else None


def marker(target: Path) -> dict[str, Any] | None:
    """The set's completion marker (written last), None where it is absent or unreadable."""
    try:
        found = json.loads((target / REQUIREMENTS_INSTALLED).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def ready(target: Path, install: list[str] | None = None) -> bool:
    """Whether the set is installed whole (the lines its marker names, each one's package still there)."""
    found = marker(target)
    return (found is not None and (install is None or found.get("install") == install)
            and bool(found.get("dist_info")) and all((target / name).is_dir() for name in found["dist_info"]))


def wheels_of(install: list[str], facts: dict[str, Any], script: str, log: Log = print) -> list[Path]:
    """The wheels of the lines: those the installed set was installed from (their hashes checked then), else the
    cached ones, hashes checked now (downloaded first where missing)."""
    found = marker(folder_for(install, facts))
    if found is not None and found.get("install") == install:
        paths = [wheels_folder() / name for name in found["wheels"]]
        if all(p.is_file() for p in paths):
            return paths
    return wheels(install, script, log)


def install(install_lines: list[str], facts: dict[str, Any], script: str, log: Log = print) -> Path:
    """The set's folder, installed first unless a whole one is there; two commands that need it: one installs,
    the other waits and then finds it ready."""
    target = folder_for(install_lines, facts)
    if not ready(target, install_lines):
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = set_lock(target)
        lock.acquire(log)
        try:
            if not ready(target, install_lines):
                if target.exists():
                    log(f"the requirement set {target} was cut short or damaged: installing it again")
                    remove(target)
                _install(target, install_lines, facts, script, log)
        finally:
            lock.release()
    with contextlib.suppress(OSError):
        (target / LAST_USED).touch()      # its owner may touch it, read-only as it is
    return target


def install_all(specs: Iterable[dict[str, Any]], log: Log = print) -> None:
    """Before any run: the set of every script spec's extra lines installed (once per machine)."""
    for spec in specs:
        if spec.get("source") == "script" and for_spec(spec):
            install(spec["script"]["requirements"]["install"], spec["provenance"], spec["script"]["path"], log)


def installer(facts: dict[str, Any]) -> Path:
    """The interpreter that installs a set: the given one, else the lock's local environment (a local run has built
    it; under Docker, where one was built), else this host's Python, which takes the same wheels for the images
    (TARGET names their Python and platform)."""
    given = facts.get("interpreter")
    if given and Path(given).exists():
        return Path(given)
    if facts.get("lock"):
        name = Path(facts["lock"]).stem
        if envs.ready(envs.ENVS, name):
            return envs.python_of(envs.env_dir(envs.ENVS, name))
    return Path(sys.executable)


def _install(target: Path, lines: list[str], facts: dict[str, Any], script: str, log: Log) -> None:
    found = wheels(lines, script, log)
    python = installer(facts)
    donors = _donors(target, python)
    reused = [line for line, wheel in zip(lines, found) if wheel.name in donors]
    log(f"requirements: installing {len(lines)} package(s) for {script} into {target} (once on this machine, read "
        f"by every run of them" + (f"; {len(reused)} linked from sets that hold them" if reused else "") + ")")
    started = time.monotonic()
    target.mkdir()
    rest = [line for line in lines if line not in reused]
    if rest:
        _pip(target, rest, python, script)
    try:
        for line, wheel in zip(lines, found):
            if line in reused:
                _link(*donors[wheel.name], target)
    except OSError as exc:          # the other set was removed meanwhile (`reprokit cache prune`)
        remove(target)
        raise UserError(f"the extra requirements of {script} did not install into {target} ({exc}); run the "
                        f"command again.") from None
    dist_info = _check(target, lines, script)
    # compiled once, on every core (pip compiles on one): a read-only set's imports cannot write their bytecode, and
    # a module that does not compile fails where it is imported, as it would anywhere; the linked ones are compiled
    subprocess.run([str(python), "-m", "compileall", "-q", "-j", "0", str(target)], capture_output=True)
    record = {"install": lines, "lock": facts.get("lock"), "lock_sha256": facts.get("lock_sha256"),
              "interpreter": facts.get("interpreter"), "installed_with": str(python), "dist_info": dist_info,
              "wheels": [p.name for p in found]}
    (target / LAST_USED).touch()
    write_text_atomic(target / REQUIREMENTS_INSTALLED, json.dumps(record, indent=1) + "\n")
    _read_only(target)
    shared = f", {envs.shown_size(_linked_bytes(target))} of it shared with other sets" if reused else ""
    log(f"requirements: installed in {time.monotonic() - started:.0f} s ({envs.shown_size(envs.size_bytes(target))}"
        f"{shared})")


def _pip(target: Path, lines: list[str], python: Path, script: str) -> None:
    """The lines installed by pip from the cached wheels alone, into a folder of their own that is then merged into
    the set's (pip's --target would skip a folder the set already has, a namespace such as nvidia/)."""
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as scratch:
        listed = Path(scratch) / "requirements.txt"
        listed.write_text("\n".join(lines) + "\n")
        # --isolated: the cached wheels alone, whatever find-links pip's configuration adds
        proc = subprocess.run([str(python), "-m", "pip", "--isolated", "install", "--no-index", "--find-links",
                               str(wheels_folder()), "--require-hashes", "--no-deps", "--disable-pip-version-check",
                               "--quiet", "--no-compile", *TARGET, "--target", str(Path(scratch) / "site"), "-r",
                               str(listed)], capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            remove(target)
            raise UserError(f"the extra requirements of {script} did not install into {target} ({tail}); run the "
                            f"command again, and if it fails the same way, `reprokit cache prune` and retry.")
        site = Path(scratch) / "site"
        for parent, _dirs, names in os.walk(site):
            into = target / Path(parent).relative_to(site)
            into.mkdir(exist_ok=True)
            for name in names:
                os.replace(Path(parent, name), into / name)


def _donors(target: Path, python: Path) -> dict[str, tuple[Path, str]]:
    """By wheel: a whole set that the same interpreter installed it into, and its dist-info folder there."""
    found: dict[str, tuple[Path, str]] = {}
    for other in sorted(sets_folder().iterdir()):
        record = marker(other) if other != target and other.is_dir() and ready(other) else None
        if record and record.get("installed_with") == str(python):
            for wheel, dist_info in zip(record["wheels"], record["dist_info"]):
                name, _, version = dist_info.removesuffix(".dist-info").partition("-")
                if parse_wheel_filename(wheel)[:2] == (canonicalize_name(name), Version(version)):
                    found.setdefault(wheel, (other, dist_info))
    return found


def _link(donor: Path, dist_info: str, target: Path) -> None:
    """A package as another set installed it from the same wheel, each of its files (its RECORD's) and their
    bytecode linked, not copied: sets are read-only, so a link is never written through, and torch in two sets
    takes its room once. pip's --target puts its scripts (``../../bin/...`` in RECORD) in the set's bin/."""
    for line in (donor / dist_info / "RECORD").read_text().splitlines():
        relative = line.rsplit(",", 2)[0].removeprefix("../../")
        if not relative or relative.startswith(".."):
            continue
        into = target / relative
        into.parent.mkdir(parents=True, exist_ok=True)
        if not into.exists():                  # a file two packages ship (a namespace's): one copy, as pip leaves
            os.link(donor / relative, into)
        if relative.endswith(".py"):
            cached = (donor / relative).parent / "__pycache__"
            for pyc in cached.glob(f"{into.stem}.*.pyc") if cached.is_dir() else ():
                (into.parent / "__pycache__").mkdir(exist_ok=True)
                if not (into.parent / "__pycache__" / pyc.name).exists():
                    os.link(pyc, into.parent / "__pycache__" / pyc.name)


def _linked_bytes(target: Path) -> int:
    """What the set's files that another set also holds (linked) take."""
    seen: set[int] = set()
    total = 0
    for parent, _dirs, names in os.walk(target):
        for name in names:
            st = os.lstat(os.path.join(parent, name))
            if st.st_nlink > 1 and st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_blocks * 512
    return total


def _check(target: Path, lines: list[str], script: str) -> list[str]:
    """The dist-info folder of each line's package (in the lines' order), as installed; a package pip left out is
    refused."""
    installed: dict[tuple[str, Version], str] = {}
    for path in target.glob("*.dist-info"):
        name, _, version = path.name.removesuffix(".dist-info").partition("-")
        installed[canonicalize_name(name), Version(version)] = path.name
    wanted = [_pinned(line)[:2] for line in lines]
    gone = [f"{name}=={version}" for name, version in wanted if (name, version) not in installed]
    if gone:
        remove(target)
        raise UserError(f"the extra requirements of {script} did not install whole into {target} ({', '.join(gone)} "
                        f"missing); run the command again.")
    return [installed[key] for key in wanted]


def _read_only(target: Path) -> None:
    """Every file and folder of the set readable by all (a container's user too) and writable by none."""
    for parent, dirs, names in os.walk(target, topdown=False):
        for name in [*names, *dirs]:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                mode = os.lstat(path).st_mode
                os.chmod(path, (mode & ~0o222) | (0o555 if name in dirs else 0o444))
    os.chmod(target, 0o555)


def remove(target: Path) -> None:
    """A set's folder gone, read-only as it is (its folders made writable first, as rmtree needs)."""
    if not target.exists():
        return
    for parent, _dirs, _names in os.walk(target):
        os.chmod(parent, 0o755)
    shutil.rmtree(target)

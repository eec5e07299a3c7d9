"""Module names to the distributions that provide them, and the flag that adds one to a script's run.

A script imports modules; pip installs distributions, and their names differ more often than a user guesses
(``import yaml`` is PyYAML's, ``import PIL`` pillow's). The kit's own environments know the answer for every
distribution they hold: each environment's interpreter is asked once for
``importlib.metadata.packages_distributions()`` (the framework's own environment first). Where none of them holds
the module, a small table of the well-known mismatches answers (``TABLE``, tested against the environments that
have them); where that cannot know either, the module's own name is the guess, as pip's users make it.

Every suggestion is a ``--require FRAMEWORK=NAMES`` flag whose names keep the user's order, each once.
"""
from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from reprokit.environments import envs, import_scan
from reprokit.environments.envs import ENVS

# module -> the distribution that provides it, where the two names differ and no kit environment holds it; a dotted
# key is a module inside a namespace that several distributions share (google.*)
TABLE = {
    "PIL": "pillow", "sklearn": "scikit-learn", "yaml": "pyyaml", "cv2": "opencv-python-headless",
    "skimage": "scikit-image", "bs4": "beautifulsoup4", "attr": "attrs", "google.protobuf": "protobuf",
    "google.cloud.storage": "google-cloud-storage", "absl": "absl-py", "ml_collections": "ml-collections",
    "tree": "dm-tree", "dateutil": "python-dateutil", "dotenv": "python-dotenv", "jwt": "pyjwt",
    "serial": "pyserial", "zmq": "pyzmq", "git": "gitpython", "Crypto": "pycryptodome", "OpenSSL": "pyopenssl",
    "fitz": "pymupdf", "docx": "python-docx", "pptx": "python-pptx", "magic": "python-magic",
    "hydra": "hydra-core", "mpl_toolkits": "matplotlib", "pkg_resources": "setuptools",
}
# packages_distributions() of the interpreter that runs it, printed as JSON (-I: nothing of the current folder)
_ASK = "import importlib.metadata, json\nprint(json.dumps(importlib.metadata.packages_distributions()))"


def canonical(name: str) -> str:
    """A distribution's name as pip compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _environments(framework: str | None) -> list[Path]:
    """The kit's built environments, the framework's own first."""
    found = sorted(p.parent.parent for p in ENVS.glob("*/bin/python") if envs.read_marker(p.parent.parent))
    own = envs.env_dir(ENVS, envs.lock_name(framework, "cpu")) if framework else None
    return sorted(found, key=lambda env: env != own)


@cache
def _distributions_of(python: Path) -> dict[str, tuple[str, ...]]:
    """One environment's top-level modules, each with its distributions; {} where it cannot say."""
    proc = subprocess.run([str(python), "-I", "-c", _ASK], capture_output=True, text=True)
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {}
    return {module: tuple(dict.fromkeys(canonical(d) for d in dists)) for module, dists in answer.items()}


def distribution(module: str, framework: str | None = None) -> tuple[str, bool]:
    """(the distribution that provides ``module``, whether it is known rather than guessed): the kit's
    environments first, the table where they cannot know, else the module's top-level name."""
    top = module.split(".")[0]
    dotted = [".".join(module.split(".")[:n]) for n in range(module.count(".") + 1, 0, -1)]
    for env in _environments(framework):
        dists = _distributions_of(envs.python_of(env)).get(top, ())
        if len(dists) == 1:
            return dists[0], True
        if dists:                            # a namespace shared by several (google): the table names the one
            break
    for name in dotted:
        if name in TABLE:
            return TABLE[name], True
    return canonical(top), False


def top_level_modules(framework: str, lock: Iterable[str]) -> set[str]:
    """The top-level modules the framework's lock installs: its environment's (where built) of the lock's
    distributions, and each distribution's own name as a module (``jax``, ``optax``) where it is not."""
    names = {canonical(d) for d in lock}
    modules = {n.replace("-", "_") for n in names}
    own = envs.env_dir(ENVS, envs.lock_name(framework, "cpu"))
    if envs.read_marker(own):
        found = _distributions_of(envs.python_of(own))
        modules |= {m for m, dists in found.items() if any(d in names for d in dists) and m.isidentifier()}
    return modules


def names_once(names: Iterable[str]) -> list[str]:
    """Each requirement once (compared as pip compares names, with their version ranges), in the order given."""
    seen: dict[str, str] = {}
    for name in names:
        seen.setdefault(canonical(name.replace(" ", "")), name.strip())
    return list(seen.values())


def require_flag(framework: str, given: Iterable[str], adding: str) -> str:
    """``--require FRAMEWORK=NAMES``: the names the run already has, then ``adding``, each once, in that order."""
    return f"--require {framework}={','.join(names_once([*given, adding]))}"


def split_names(text: str) -> list[str]:
    """``a,b>=1,<2,c[x,y]`` as --require gives it: split at each comma that starts another name (a comma of a version
    range or of extras does not)."""
    return [n.strip() for n in re.split(r",(?![^\[]*\])(?=\s*[A-Za-z0-9])", text) if n.strip()]


def way_out(framework: str, module: str, requirements: str | None) -> str:
    """How to add the distribution that provides ``module`` (dotted, as the script imports it) to a script's run:
    ``requirements``, the script's requirements as its spec names them (the --require flag as given, or a file),
    None where it has none."""
    dist, _ = distribution(module, framework)
    why = "" if dist == canonical(module.split(".")[0]) else f" ({dist} provides {module})"
    if requirements is None:
        return f"add it with --require {framework}={dist} or a requirements.txt beside the script{why}"
    if requirements.startswith("--require"):
        return f"add it with {require_flag(framework, split_names(requirements.partition('=')[2]), dist)}{why}"
    return f"add {dist} to {requirements}{why}"


def _shown(file: str, folder: str) -> str:
    """Where an import was, as a reader finds it: relative to the script's copy, or to site-packages."""
    for marker in ("/work/", "/site-packages/", "/dist-packages/", "/requirements/"):
        if marker in file:
            return file.rsplit(marker, 1)[1]
    return file.removeprefix(folder.rstrip("/") + "/")


def explain_missing(result: dict[str, Any]) -> None:
    """A probed run that failed on an import ends in one sentence with the way out: the distribution that provides
    the module and the flag that adds it, or, for a module of the script's own tree, how the script runs so that
    it finds it (never a package of the index under its name). From the probe's ``failure.missing_module``."""
    failure, spec = result.get("failure") or {}, result.get("spec") or {}
    missing, script = failure.get("missing_module"), spec.get("script") or {}
    if not missing or not script:
        return
    name, framework, folder = missing["name"], spec["framework"], script["folder"]
    by = f"{_shown(missing['file'], folder)} line {missing['line']}"
    own = import_scan.not_found(Path(folder), script["path"], name.split(".")[0], by, framework)
    requirements = (script.get("requirements") or {}).get("file")
    failure["message"] = (f"{failure['message']}: {own}" if own else
                          f"{failure['message']} ({by}), which the {framework} environment lacks: "
                          f"{way_out(framework, name, requirements)}")

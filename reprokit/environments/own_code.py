"""A script's own code: the root it runs from, the module it runs as, and the names its tree provides.

A script inside a package imports that package by name (JAX's ``examples/mnist_classifier.py`` does ``from
examples import datasets``), and its README runs it as ``python -m examples.mnist_classifier`` from the
repository's root. Before any run the kit finds that root: it walks up from the script's folder through folders
that hold an ``__init__.py``, and stops at a folder with ``.git``, ``pyproject.toml`` or ``setup.py``, or at the
first folder without ``__init__.py``. A script that imports its own package (a name its root provides and its own
folder does not, or a relative import) runs as its module from that root, as ``python -m`` runs it.

These names are the script's own: the kit never takes one for a package of the index, never suggests installing
one, and refuses a requirement that would install a module under one of them (reprokit/environments/import_scan.py).
"""
from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

from reprokit.environments import notebooks
from reprokit.kits.contract import work_folder

ROOT_MARKERS = (".git", "pyproject.toml", "setup.py")
# how far up the scan looks for a package a script outside any package imports from a folder beside its own
ANCESTORS = 3


def root_of(script: Path) -> Path:
    """The folder the script's package hangs from: its own folder where it is in no package."""
    here = script.resolve().parent
    while (here / "__init__.py").is_file() and not any((here / m).exists() for m in ROOT_MARKERS) \
            and here.parent != here:
        here = here.parent
    return here


def dotted(relative: Path) -> str | None:
    """The module name of a file relative to its root (``examples/mnist.py``: examples.mnist), or None where a
    part is not a Python name (``python -m`` could not name it)."""
    parts = [*relative.parts[:-1], relative.stem] if relative.name != "__main__.py" else [*relative.parts[:-1]]
    return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None


def module_file(root: Path, module: str) -> Path | None:
    """The file ``python -m MODULE`` runs from root: MODULE's .py file, or its package's __main__.py."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_name(base.name + ".py"), base / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def provided(entry: Path) -> dict[str, list[Path]]:
    """The top-level modules a folder on sys.path provides (a module, or a package: a folder of .py files), each
    with the files that make it."""
    out: dict[str, list[Path]] = {}
    if not entry.is_dir():
        return out
    for path in sorted(entry.iterdir()):
        if path.suffix == ".py" and path.stem.isidentifier():
            out.setdefault(path.stem, [path])
        elif path.is_dir() and path.name.isidentifier() and not work_folder.skipped(path) and any(path.glob("*.py")):
            out.setdefault(path.name, sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts))
    return out


def _tree(source: bytes) -> ast.AST | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None                      # the run says so: its result is the script's SyntaxError


def top_level_imports(tree: ast.AST) -> Iterator[str]:
    """Every top-level name a module imports absolutely, and "." for a relative import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield "." if node.level else (node.module or "").split(".")[0]


def imports_own_package(script: Path, root: Path, installed: Callable[[str], bool]) -> bool:
    """Whether the script (in a package under root) imports what only its root provides, or imports relatively:
    then only ``python -m`` from the root runs it. A name the environment installs (``installed``: a checkout of
    the library beside its examples) is not the script's own."""
    if root == script.resolve().parent:
        return False
    tree = _tree(notebooks.source(script))
    if tree is None:
        return False
    rooted, beside = provided(root), provided(script.resolve().parent)
    return any(name == "." or (name in rooted and name not in beside and not installed(name))
               for name in top_level_imports(tree))


def run_as_module(script: Path, installed: Callable[[str], bool]) -> tuple[Path, str] | None:
    """(root, module) where the script imports its own package and runs as that module from its root."""
    root = root_of(script)
    name = dotted(script.resolve().relative_to(root))
    return (root, name) if name and imports_own_package(script, root, installed) else None


def holder(start: Path, name: str) -> Path | None:
    """The folder above the script's (up to its repository's root, ANCESTORS at most) that provides a top-level
    module ``name``: where ``python -m`` would have to run from for the import to work."""
    here = start.resolve()
    for _ in range(ANCESTORS):
        if any((here / m).exists() for m in ROOT_MARKERS) or here.parent == here:
            return None
        here = here.parent
        if name in provided(here):
            return here
    return None


def in_tree(root: Path, name: str) -> Path | None:
    """The first folder under root (as a run copies it) that provides a top-level module ``name``."""
    for folder, _ in work_folder.walk(root):
        if name in provided(folder):
            return folder
    return None

"""Before any run: each module a script imports that its environment lacks, named with the way to add it.

The scan reads the script (and its shim) with ast, and the folder's own modules it imports, in turn. It
checks top-level names only: a framework loads its submodules lazily (``tensorflow.keras``,
``torch.utils.data``), and a package that is there has them. An import inside ``try: ... except
ImportError`` (or ModuleNotFoundError, Exception) is optional: the script does without it. A name is
present where it is the standard library's, one of the folder's own modules, a package of the
framework's lock by name, a top-level module of the script's extra wheels, or one the environment's
own interpreter finds (``importlib.util.find_spec``, asked once, only about the names left).
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from reprokit.environments import notebooks
from reprokit.errors import UserError

OPTIONAL = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
STDLIB = set(sys.stdlib_module_names) | set(sys.builtin_module_names) | {"__main__"}
# the names the environment cannot find, printed as JSON (-I: neither the current folder nor PYTHON* variables)
_ASK = ("import importlib.util, json, sys\n"
        "print(json.dumps([n for n in sys.argv[1:] if importlib.util.find_spec(n) is None]))")


def _catches_import_errors(handler: ast.ExceptHandler) -> bool:
    caught = handler.type
    names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    return caught is None or any(isinstance(n, ast.Name) and n.id in OPTIONAL or
                                 isinstance(n, ast.Attribute) and n.attr in OPTIONAL for n in names)


def imports(tree: ast.AST) -> Iterator[str]:
    """The top-level names a module imports absolutely, those under a try that handles ImportError left out."""
    def visit(node: ast.AST, optional: bool) -> Iterator[str]:
        if isinstance(node, ast.Import) and not optional:
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not optional and node.module and not node.level:
            yield node.module.split(".")[0]
        elif isinstance(node, (ast.Try, ast.TryStar)):
            guarded = optional or any(_catches_import_errors(h) for h in node.handlers)
            for stmt in node.body:
                yield from visit(stmt, guarded)
            for other in [*node.handlers, *node.orelse, *node.finalbody]:
                yield from visit(other, optional)
            return
        for child in ast.iter_child_nodes(node):
            yield from visit(child, optional)
    yield from visit(tree, False)


def _own(folder: Path, start: Path) -> dict[str, list[Path]]:
    """The folder's own top-level modules (beside the script too), each with the files that make it."""
    out: dict[str, list[Path]] = {}
    for root in dict.fromkeys([folder, start.parent]):
        for path in root.iterdir():
            if path.suffix == ".py":
                out.setdefault(path.stem, [path])
            elif path.is_dir() and path.name.isidentifier() and any(path.glob("*.py")):     # a package
                out.setdefault(path.name, sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts))
    return out


def scan(folder: Path, scripts: Iterable[str]) -> dict[str, str]:
    """Each module the scripts need from outside their folder and the standard library, with the first file
    (relative to the folder) that imports it."""
    files = [folder / s for s in scripts]
    own = _own(folder, files[0])
    needed: dict[str, str] = {}
    seen: set[Path] = set()
    while files:
        path = files.pop(0)
        if path in seen:
            continue
        seen.add(path)
        try:
            tree = ast.parse(notebooks.source(path), str(path))      # a notebook: its code cells
        except (SyntaxError, ValueError):
            continue                    # the run says so: its result is the script's SyntaxError
        for name in imports(tree):
            if name in own:
                files += own[name]
            elif name not in STDLIB:
                needed.setdefault(name, path.relative_to(folder).as_posix())
    return needed


def _lacking(python: Path, names: list[str]) -> list[str]:
    proc = subprocess.run([str(python), "-I", "-c", _ASK, *names], capture_output=True, text=True)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{python} could not say which modules it has ({why}); check that the environment runs")
    lacking: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return lacking


def check(folder: Path, scripts: Iterable[str], framework: str, packages: Iterable[str], provided: set[str],
          python: Callable[[], Path], way_out: Callable[[str], str]) -> None:
    """Refuse, one sentence each, the modules the scripts import that the framework's environment lacks:
    ``packages`` are the lock's distributions, ``provided`` the extra wheels' modules, ``python()`` the
    environment's interpreter (built where it must be), ``way_out(module)`` how to add one."""
    def key(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()
    known = {key(p) for p in packages} | {key(m) for m in provided}
    needed = {name: by for name, by in scan(folder, scripts).items() if key(name) not in known}
    if not needed:
        return
    lacking = _lacking(python(), sorted(needed))
    if lacking:
        raise UserError("\n".join(f"{needed[name]} imports {name}, which the {framework} environment lacks: "
                                  f"{way_out(name)}" for name in sorted(lacking, key=list(needed).index)))

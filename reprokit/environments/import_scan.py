"""Before any run: each module a script imports that its environment lacks, named with the way to add it.

The scan reads the script (and its shim) with ast, and the folder's own modules it imports, in turn. It
checks top-level names only: a framework loads its submodules lazily (``tensorflow.keras``,
``torch.utils.data``), and a package that is there has them. An import inside ``try: ... except
ImportError`` (or ModuleNotFoundError, Exception) is optional: the script does without it. A name is
present where it is the standard library's, one of the folder's own modules, a package of the
framework's lock by name, a top-level module of the script's extra wheels, or one the environment's
own interpreter finds (``importlib.util.find_spec``, asked once, only about the names left).

A name the script's own tree provides is never taken for a package of the index
(reprokit/environments/own_code.py): where the run does not find it, the sentence says how the script runs so
that it does (``python -m`` from the folder that holds it), never what to install. For the same reason a
requirement whose wheel installs a top-level module under the name of one of the script's own is refused
(``shadowing``).
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from reprokit.environments import notebooks, own_code
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
    """The modules a module imports absolutely (dotted), those under a try that handles ImportError left out."""
    def visit(node: ast.AST, optional: bool) -> Iterator[str]:
        if isinstance(node, ast.Import) and not optional:
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not optional and node.module and not node.level:
            yield node.module
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


def own_modules(folder: Path, script: str) -> dict[str, list[Path]]:
    """The folder's own top-level modules (beside the script too), each with the files that make it."""
    return {**own_code.provided((folder / script).parent), **own_code.provided(folder)}


def _scan(folder: Path, scripts: Iterable[str], lock: Callable[[str], bool] = lambda name: False
          ) -> dict[str, tuple[str, str]]:
    """Each top-level name the scripts need from outside their folder and the standard library, with the first
    file (relative to the folder) that imports it and the module it imports there (dotted). A package of the
    folder named like one of the lock's (``lock(name)``: a checkout of the library, which the run leaves out) is
    the lock's."""
    scripts = list(scripts)
    files = [folder / s for s in scripts]
    own = {name: made for name, made in own_modules(folder, scripts[0]).items() if not lock(name)}
    needed: dict[str, tuple[str, str]] = {}
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
        for module in imports(tree):
            name = module.split(".")[0]
            if name in own:
                files += own[name]
            elif name not in STDLIB:
                needed.setdefault(name, (path.relative_to(folder).as_posix(), module))
    return needed


def scan(folder: Path, scripts: Iterable[str]) -> dict[str, str]:
    """Each module the scripts need from outside their folder and the standard library, with the first file
    (relative to the folder) that imports it."""
    return {name: by for name, (by, _) in _scan(folder, scripts).items()}


def _lacking(python: Path, names: list[str]) -> list[str]:
    proc = subprocess.run([str(python), "-I", "-c", _ASK, *names], capture_output=True, text=True)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{python} could not say which modules it has ({why}); check that the environment runs")
    lacking: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return lacking


def not_found(folder: Path, script: str, name: str, by: str, framework: str) -> str | None:
    """The sentence for a name the script's own tree provides and its run does not find, or None where the tree
    does not provide it: how the script runs so that the import works, never a package to install."""
    path = folder / script
    holder = own_code.holder(path.parent, name)
    if holder is not None:
        module = own_code.dotted(path.resolve().relative_to(holder))
        how = (f"run it as its module from {holder}: --script \"{framework}=-m {module}\" there, or module = "
               f"\"{module}\" with folder = \"{holder}\" in [scripts]" if module else
               f"run it from {holder} as python -m would (its folders' names are not Python names: rename them)")
        return (f"{by} imports {name}, a package of the script's own tree ({holder / name}) that `python "
                f"{path.name}` does not put on the path: {how}")
    inside = own_code.in_tree(folder, name)
    if inside is not None:
        return (f"{by} imports {name}, which the script's own tree holds ({inside / name}) where its run does not "
                f"find it: run the script from the folder that holds {name} (--script \"{framework}=-m MODULE\" "
                f"there); the kit never installs a package of the index under the name of the script's own code")
    return None


def check(folder: Path, scripts: Iterable[str], framework: str, packages: Iterable[str], provided: set[str],
          python: Callable[[], Path], way_out: Callable[[str], str]) -> None:
    """Refuse, one sentence each, the modules the scripts import that the framework's environment lacks:
    ``packages`` are the lock's distributions, ``provided`` the extra wheels' modules, ``python()`` the
    environment's interpreter (built where it must be), ``way_out(module)`` how to add one (``module`` dotted as
    the script imports it). A name of the script's own tree gets how to run the script instead."""
    def key(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()
    scripts = list(scripts)
    known = {key(p) for p in packages} | {key(m) for m in provided}
    needed = {name: found for name, found in _scan(folder, scripts, lambda n: key(n) in known).items()
              if key(name) not in known}
    if not needed:
        return
    lacking = _lacking(python(), sorted(needed))
    if lacking:
        raise UserError("\n".join(
            not_found(folder, scripts[0], name, needed[name][0], framework)
            or f"{needed[name][0]} imports {name}, which the {framework} environment lacks: {way_out(needed[name][1])}"
            for name in sorted(lacking, key=list(needed).index)))


def shadowing(wheels: Iterable[Path], own: dict[str, list[Path]], where: str) -> None:
    """Refuse, one sentence each, a wheel of the script's requirements that installs a top-level module under the
    name of one of the script's own (``own``: name -> its files): the index's code would stand in for the user's."""
    refused = []
    for wheel in sorted(wheels):
        clash = sorted(wheel_modules(wheel) & set(own))
        if clash:
            # a package by its folder, a module by its file
            mine = ", ".join(f"{n} ({next((a for a in own[n][0].parents if a.name == n), own[n][0])})" for n in clash)
            refused.append(f"{where}: {wheel.name.split('-')[0]} would install the top-level module "
                           f"{', '.join(clash)} ({wheel.name}), the name of the script's own {mine}: a package of the "
                           f"index never stands in for the script's own code, so drop it from the requirements")
    if refused:
        raise UserError("\n".join(refused))


def wheel_modules(wheel: Path) -> set[str]:
    """The top-level modules a wheel installs: its top_level.txt where it has one, else its RECORD's paths."""
    with zipfile.ZipFile(wheel) as archive:
        members = archive.namelist()
        listed = next((m for m in members if m.endswith(".dist-info/top_level.txt")), None)
        if listed:
            return {line.strip().split("/")[0] for line in archive.read(listed).decode().splitlines() if line.strip()}
    names = set()
    for member in members:
        head, _, rest = member.partition("/")
        if not head.endswith((".dist-info", ".data")):
            names.add(head if rest else head.split(".")[0])    # foo/..., foo.py, foo.cpython-311-....so
    return names

"""A script entry of an experiment file (``[scripts]`` or a variant's ``scripts``), or of ``--script``, resolved and
checked where it is read: its folder, path (or module), arguments, shim, requirements and notebook. The experiment
loader reads entries through this module; reprokit/plan/script_plan.py expands them into specs.

A script that imports its own package runs as its module from its root (reprokit/environments/own_code.py), as
``python -m`` runs it: ``--script "jax=examples/mnist_classifier.py"`` becomes ``python -m
examples.mnist_classifier`` in the folder that holds ``examples/``. ``--script "jax=-m MODULE ARGS"`` names the
module itself, from the current folder; an experiment file gives ``module = "..."`` instead of ``path``, with
``folder`` its root. A package at the top of the run's import path named like a module of the framework's lock
(a checkout of ``jax/`` beside the examples) is left out of the run's copy, and declared. A script started
through its launcher (``--script "pytorch=torchrun --nproc-per-node 2 train.py"``, or ``launcher = "..."`` beside
``path``) has it read and checked here (reprokit/plan/launchers.py).
"""
from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reprokit.environments import module_names, notebooks, own_code, script_requirements
from reprokit.errors import UserError
from reprokit.kits.contract import work_folder
from reprokit.kits.contract.launchers import FRAMEWORK as LAUNCHED
from reprokit.kits.contract.names import label
from reprokit.plan import launchers
from reprokit.plan.request import ScriptCommand


def _missing_module(module: str) -> str:
    relative = module.replace(".", "/")
    return f"python -m {module} finds neither {relative}.py nor {relative}/__main__.py"


def _installed(framework: str) -> Callable[[str], bool]:
    """Whether a top-level module is one the framework's lock installs (asked only of a name the root provides)."""
    return lambda name: name in module_names.top_level_modules(framework, script_requirements.locked(framework))


def command_entry(framework: str, command: ScriptCommand) -> dict[str, Any]:
    """The [scripts] entry a ``--script`` makes: a module from the current folder, or a script from its root where
    it imports its own package (else from its own folder); its launcher as an experiment file writes it."""
    launcher = {"launcher": shlex.join(command.launcher)} if command.launcher else {}
    if command.module:
        if own_code.module_file(command.cwd, command.module) is None:
            raise UserError(f"--script {framework}=-m {command.module}: {_missing_module(command.module)} in the "
                            f"current folder {command.cwd}; run the command from the folder that holds the package")
        return {"module": command.module, "folder": str(command.cwd), "args": list(command.args), **launcher}
    path = command.path
    if path is None or not path.is_file():
        raise UserError(f"--script {framework}={path}: no such file; give the path of the script to run")
    script = path.resolve()
    as_module = None if notebooks.is_notebook(script) else own_code.run_as_module(script, _installed(framework))
    folder = as_module[0] if as_module else script.parent
    return {"path": script.relative_to(folder).as_posix(), "folder": str(folder), "args": list(command.args),
            **launcher}


def _left_out(folder: Path, entry: Path, framework: str) -> list[str]:
    """The packages at the top of the run's import path named like a top-level module of the framework's lock:
    the run would import them instead of the installed ones (the environment is asked only where a package is)."""
    packages = {p.name for p in entry.iterdir() if (p / "__init__.py").is_file()} if entry.is_dir() else set()
    if not packages:
        return []
    modules = module_names.top_level_modules(framework, script_requirements.locked(framework))
    return work_folder.shadowing(folder, [entry], packages & modules)


def _launcher(entry: dict[str, Any], experiment_file: Path, framework: str, module: bool, shim: bool,
              notebook: bool) -> tuple[dict[str, Any] | None, list[str]]:
    """The entry's launcher, read and checked (reprokit/plan/launchers.py): its name and options, or None; and the
    script's arguments, less the launcher's own options it reads there too (fabric run's)."""
    args = list(entry.get("args", []))
    if not entry.get("launcher"):
        return None, args
    shown = f"{experiment_file}: scripts: launcher {entry['launcher']!r}"
    name, options = launchers.parse(entry["launcher"], shown)
    taken, args = launchers.taken_after(name, args)
    options += taken
    launchers.check(name, options, shown, module)
    if framework != LAUNCHED:
        raise UserError(f"{shown} starts {label(LAUNCHED)}'s ranks; a {label(framework)} script runs without one "
                        f"(its N devices come from --devices N)")
    if shim or notebook:
        raise UserError(f"{shown}: the launcher runs the script in processes of its own, where "
                        f"{'a shim' if shim else 'a notebook'} does not run; give it a .py script without a shim")
    return {"name": name, "options": options}, args


def script_entry(value: str | dict[str, Any], experiment_file: Path, framework: str) -> dict[str, Any]:
    """A script as the experiment file gives it, resolved: its folder (absolute), path in it (the module's file for
    a module), module (None: run as a path), args, shim, extra requirements
    (reprokit/environments/script_requirements.py), notebook, and the folders left out of its copy."""
    entry = {"path": value} if isinstance(value, str) else dict(value)
    folder = (experiment_file.parent / entry.get("folder", ".")).resolve()
    module = entry.get("module")
    if module:
        found = own_code.module_file(folder, module)
        if found is None:
            raise UserError(f"{experiment_file}: scripts: {_missing_module(module)} in {folder}; give the module as "
                            f"python -m runs it from the folder, and that folder as folder")
        path = found
    else:
        path = folder / entry["path"]
        if not path.is_file():
            raise UserError(f"{experiment_file}: scripts: {entry['path']} is not a file in {folder}; give the path "
                            f"of the script relative to its folder")
        as_module = None if notebooks.is_notebook(path) else own_code.run_as_module(path, _installed(framework))
        if as_module and as_module[0] != folder:
            root, module = as_module
            raise UserError(f"{experiment_file}: scripts: {entry['path']} imports its own package, so it runs as "
                            f"python -m {module} from {root}: give module = \"{module}\" and folder = "
                            f"\"{os.path.relpath(root, experiment_file.parent)}\"")
        module = as_module and as_module[1]
    shim = entry.get("shim")
    if shim and not (folder / shim).is_file():
        raise UserError(f"{experiment_file}: scripts: the shim {shim} is not a file in {folder}")
    named = entry.get("requirements")
    if named and not (folder / named).is_file():
        raise UserError(f"{experiment_file}: scripts: the requirements file {named} is not a file in {folder}")
    launcher, args = _launcher(entry, experiment_file, framework, bool(module), bool(shim), notebooks.is_notebook(path))
    # the file the entry names, else a requirements.txt beside the script (--require replaces either: specs_for)
    requirements = named or (path.parent / script_requirements.BESIDE).relative_to(folder).as_posix()
    return {"folder": folder, "path": path.relative_to(folder).as_posix(), "args": args,
            "shim": shim, "requirements": script_requirements.from_file(folder, requirements)
            if (folder / requirements).is_file() else None,
            # a notebook's code cells as one script, its IPython lines settled (refused here, before any run)
            "notebook": notebooks.convert(path) if notebooks.is_notebook(path) else None,
            "module": module or None, "left_out": _left_out(folder, folder if module else path.parent, framework),
            "launcher": launcher}

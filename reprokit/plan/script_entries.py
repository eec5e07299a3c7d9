"""A script entry of an experiment file (``[scripts]`` or a variant's ``scripts``), resolved and checked where it is
read: its folder, path, arguments, shim, requirements and notebook. The experiment loader reads entries through this
module; reprokit/plan/script_plan.py expands them into specs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from reprokit.environments import notebooks, script_requirements
from reprokit.errors import UserError


def script_entry(value: str | dict[str, Any], experiment_file: Path, framework: str) -> dict[str, Any]:
    """A script as the experiment file gives it, resolved: its folder (absolute), path in it, args, shim and
    extra requirements (reprokit/environments/script_requirements.py)."""
    entry = {"path": value} if isinstance(value, str) else dict(value)
    folder = (experiment_file.parent / entry.get("folder", ".")).resolve()
    path = folder / entry["path"]
    if not path.is_file():
        raise UserError(f"{experiment_file}: scripts: {entry['path']} is not a file in {folder}; give the path "
                        f"of the script relative to its folder")
    shim = entry.get("shim")
    if shim and not (folder / shim).is_file():
        raise UserError(f"{experiment_file}: scripts: the shim {shim} is not a file in {folder}")
    named = entry.get("requirements")
    if named and not (folder / named).is_file():
        raise UserError(f"{experiment_file}: scripts: the requirements file {named} is not a file in {folder}")
    # the file the entry names, else a requirements.txt beside the script (--require replaces either: specs_for)
    requirements = named or (path.parent / script_requirements.BESIDE).relative_to(folder).as_posix()
    return {"folder": folder, "path": path.relative_to(folder).as_posix(), "args": list(entry.get("args", [])),
            "shim": shim, "requirements": script_requirements.from_file(folder, requirements)
            if (folder / requirements).is_file() else None,
            # a notebook's code cells as one script, its IPython lines settled (refused here, before any run)
            "notebook": notebooks.convert(path) if notebooks.is_notebook(path) else None}

"""The file the probe runs: the script itself, or, for a notebook, the script the host converted its code cells to.

The converted text comes in the spec (reprokit/environments/notebooks.py), checked against its sha256 and the
notebook in the work folder against its own, and is written beside the work folder, not in it: the work folder
is a copy of the notebook's, where the code runs (its relative paths, ./data, resolve there) and its figures
are looked for.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from kits.contract.spec import ScriptSpec


class NotebookChanged(RuntimeError):
    """The notebook or its converted text is not what the plan hashed."""


def script_file(spec: ScriptSpec, work: Path) -> tuple[Path, list[str]]:
    """The path to run, and the declarations that come with it (what converting the notebook left out)."""
    notebook = spec.script.notebook
    if notebook is None:
        return work / spec.script.path, []
    if hashlib.sha256((work / spec.script.path).read_bytes()).hexdigest() != notebook.sha256:
        raise NotebookChanged(f"{spec.script.path} changed since the run was planned; plan it again")
    if hashlib.sha256(notebook.code.encode()).hexdigest() != notebook.code_sha256:
        raise NotebookChanged(f"the spec's converted text of {spec.script.path} does not match its sha256")
    converted = work.with_name("notebook") / f"{Path(spec.script.path).stem}.py"
    converted.parent.mkdir(parents=True, exist_ok=True)
    converted.write_text(notebook.code)
    said = [f"the notebook {spec.script.path} (sha256 {notebook.sha256}) runs as one script of its code cells in "
            f"order, converted on the host by jupytext (sha256 {notebook.code_sha256}), in its own folder"]
    return converted, said + notebook.left_out

"""The file the probe runs, and how: the script itself, or, for a notebook, the script the host converted its code
cells to, run one cell at a time as Jupyter runs them.

The converted text comes in the spec (reprokit/environments/notebooks.py), checked against its sha256 and the
notebook in the work folder against its own, and is written beside the work folder, not in it: the work folder
is a copy of the notebook's, where the code runs (its relative paths, ./data, resolve there) and its figures
are looked for. Each cell is compiled on its own lines of that file, so a traceback reads against it, with the
``__future__`` imports of the cells before it, as IPython compiles them. A cell that raises the error its saved
output shows (its type, by name), or any error where it is only tagged ``raises-exception`` (as nbclient reads
the tag), is declared and the next cell runs; a cell that raises another error than its saved one stops the
run, naming both.
"""
from __future__ import annotations
import __future__

import hashlib
import runpy
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from reprokit.kits.contract import work_folder
from reprokit.kits.contract.spec import Notebook, NotebookCell, ScriptSpec

KITS = Path(__file__).resolve().parents[1]       # the kit's own code: an error raised there is the probe's
# each __future__ feature's compiler flag (one bit each)
FUTURE_FLAGS = sum(getattr(__future__, feature).compiler_flag for feature in __future__.all_feature_names)


class NotebookChanged(RuntimeError):
    """The notebook or its converted text is not what the plan hashed."""


class NotTheSavedError(Exception):
    """A cell raised another error than the one its saved output shows: the notebook runs otherwise than it ran."""


def script_file(spec: ScriptSpec, work: Path) -> tuple[Path, list[str]]:
    """The path to run, and the declarations that come with it (what converting the notebook left out and ran as
    its Python)."""
    notebook = spec.script.notebook
    if notebook is None:
        return work / spec.script.path, []
    if hashlib.sha256((work / spec.script.path).read_bytes()).hexdigest() != notebook.sha256:
        raise NotebookChanged(f"{spec.script.path} changed since the run was planned; plan it again")
    if hashlib.sha256(notebook.code.encode()).hexdigest() != notebook.code_sha256:
        raise NotebookChanged(f"the spec's converted text of {spec.script.path} does not match its sha256")
    converted = work.with_name(work_folder.NOTEBOOK_FOLDER) / f"{Path(spec.script.path).stem}.py"
    converted.parent.mkdir(parents=True, exist_ok=True)
    converted.write_text(notebook.code)
    how = "each of its code cells in order, as Jupyter runs them" if notebook.cells else \
        "one script of its code cells in order"
    said = [f"the notebook {spec.script.path} (sha256 {notebook.sha256}) runs as {how}, converted on the host by "
            f"jupytext (sha256 {notebook.code_sha256}), in its own folder"]
    return converted, said + notebook.left_out + notebook.honoured


def run(spec: ScriptSpec, script: Path, init_globals: dict[str, Any], declared: list[str]) -> None:
    """Run the script as ``python SCRIPT`` runs it (runpy, as ``__main__``); a notebook's code cells one at a time,
    each cell that raised as expected declared in ``declared`` as the run goes."""
    notebook = spec.script.notebook
    if notebook is None or not notebook.cells:
        runpy.run_path(str(script), init_globals=init_globals, run_name="__main__")
    else:
        run_cells(notebook, Path(spec.script.path).name, script, init_globals, declared)


def run_cells(notebook: Notebook, name: str, script: Path, init_globals: dict[str, Any],
              declared: list[str]) -> None:
    """The notebook's code cells, in order, in one ``__main__`` namespace (as runpy makes it for a script)."""
    lines = script.read_text().splitlines(keepends=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(init_globals)
    main.__dict__.update(__file__=str(script), __loader__=None, __package__=None, __spec__=None, __cached__=None)
    flags = 0                # a cell's __future__ imports hold for the cells after it, as in IPython
    before, sys.modules["__main__"] = sys.modules["__main__"], main
    try:
        for cell in notebook.cells:
            text = "\n" * (cell.first_line - 1) + "".join(lines[cell.first_line - 1:cell.last_line])
            try:
                code = compile(text, str(script), "exec", flags, dont_inherit=True)
                flags |= code.co_flags & FUTURE_FLAGS
                exec(code, main.__dict__)
            except Exception as exc:     # noqa: BLE001 - a cell's error: expected, or the run's end
                if not _expected(cell, exc, name):
                    raise
                declared.append(_raised(cell, exc, name))
            else:
                if cell.error or cell.tagged:
                    declared.append(f"{_where(cell, name)} raised no error, where {_saved(cell)}; the run went on")
    finally:
        sys.modules["__main__"] = before


def _expected(cell: NotebookCell, exc: Exception, name: str) -> bool:
    """Whether a cell's error is the one it raises on purpose: its saved error's type, by name (Jupyter saves
    ``type(exc).__name__`` as ename), or any error where the cell is only tagged raises-exception, as nbclient
    reads the tag (it lets a tagged cell raise whatever it raises). The probe's own errors, raised in the kit's
    code (its data, network guard, GPU check), are never the cell's. Another error than the saved one stops the
    run, naming both."""
    raised_in = Path(traceback.extract_tb(exc.__traceback__)[-1].filename)
    if raised_in.is_relative_to(KITS) or not (cell.error or cell.tagged):
        return False
    if cell.error and type(exc).__name__ != cell.error:
        raise NotTheSavedError(f"{_where(cell, name)} raised {_error(exc)}, not the {cell.error} its saved output "
                               f"shows ({cell.error}: {cell.error_value}), so the notebook runs otherwise here than "
                               f"when it was saved; run it in Jupyter and save it again, or fix the cell") from exc
    return True


def _raised(cell: NotebookCell, exc: Exception, name: str) -> str:
    why = f"as {_saved(cell)}" if cell.error else \
        "as its raises-exception tag allows (any error, as nbclient reads the tag)"
    return f"{_where(cell, name)} raised {_error(exc)}, {why}; the run went on with the next cell, as Jupyter does"


def _where(cell: NotebookCell, name: str) -> str:
    return f"{name}, cell {cell.number} (counting every cell from 1)"


def _saved(cell: NotebookCell) -> str:
    return f"its saved output shows {cell.error}: {cell.error_value}" if cell.error else \
        "it is tagged raises-exception"


def _error(exc: Exception) -> str:
    """An error as its type and the first line of its message (a framework's can run to pages)."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"

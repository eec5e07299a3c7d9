"""A notebook given as a script (``--script tensorflow=tutorial.ipynb``): its code cells, in order, as one script.

jupytext converts it: nbformat (its dependency) reads and checks the file and upgrades an older notebook
format, and the ``py:percent`` text keeps each cell under a ``# %%`` marker with the markdown as comments, so
a traceback's line reads against the notebook. nbconvert's PythonExporter would do the same with a templating
stack (jinja2, bleach, mistune, ...) and IPython to rewrite the magics, which a script cannot run anyway.

IPython's own lines are settled at plan time, by what they mean for a script: ``%matplotlib`` is left out
(plots already draw off screen under the probe) and declared; ``!pip install`` or ``%pip install`` is left out
and declared where the script's requirements (--require, or a requirements.txt beside the notebook) or its
framework's lock give every package it names, and refused, naming its cell, where not; any other magic or
shell line is refused, naming its cell and line. The user's file is never edited: the converted text goes
into the spec with its sha256 and the notebook's (both in the run id), and the probe runs it in a copy of
the notebook's folder (kits/training_loop/notebook_script.py).
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import shlex
import tokenize
import warnings
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from reprokit.errors import UserError

SUFFIX = ".ipynb"
# %magic, %%cell magic, !shell, files = !ls (not an expression's continuation line: "% b", "!= b")
_ESCAPE = re.compile(r"^\s*(?:[\w.]+\s*=\s*)?(?:!(?!=)|%%?\w)")
_PLOTS = re.compile(r"^\s*%matplotlib\b")
_INSTALL = re.compile(r"^\s*[!%]\s*(?:\{sys\.executable\}\s+-m\s+pip|python3?\s+-m\s+pip|pip3?|conda|mamba)"
                      r"\s+install\s+(?P<args>.*)$")
_OPTIONS_WITH_VALUES = {"-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url",
                        "--extra-index-url", "-f", "--find-links", "--target", "-t", "--prefix"}


def is_notebook(path: str | Path) -> bool:
    return Path(path).suffix == SUFFIX


def source(path: Path) -> bytes:
    """What the plan's scans read as the script's code: a notebook's converted text, any other file as it is."""
    return convert(path)["code"].encode() if is_notebook(path) else path.read_bytes()


def convert(path: Path) -> dict[str, Any]:
    """The notebook's code cells as one script: the notebook's sha256, the converted text and its sha256, what was
    left out (declared), and its install lines (where, text, package names) for ``for_spec``."""
    raw = path.read_bytes()
    return _convert(path.name, raw)


@lru_cache(maxsize=16)
def _convert(name: str, raw: bytes) -> dict[str, Any]:
    import jupytext  # a host dependency read only for notebooks (about 0.15 s to import)
    from nbformat import ValidationError
    try:
        json.loads(raw)
    except ValueError as exc:                    # not UTF-8, or not JSON
        raise UserError(f"{name} is not a notebook: it is not valid JSON ({exc}); save it again from Jupyter, "
                        f"or give a .py script") from None
    try:
        with warnings.catch_warnings():     # nbformat's warning about cells without ids: not the user's concern
            warnings.simplefilter("ignore")
            nb = jupytext.reads(raw.decode(), fmt="ipynb")
    except (ValueError, ValidationError, AttributeError, KeyError, TypeError) as exc:     # JSON, not a notebook
        raise UserError(f"{name} is JSON but not a Jupyter notebook that nbformat reads ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:120]}); save it again from Jupyter, or give a .py "
                        f"script") from None
    left_out, installs = [], []
    for number, cell in enumerate(nb.cells, 1):
        if cell.cell_type != "code":
            continue
        lines = cell.source.splitlines()
        escapes = _escapes(lines)
        for i in escapes:
            where, text = f"{name}, cell {number} (counting every cell from 1), line {i + 1}", lines[i].strip()
            if _PLOTS.match(text):
                left_out.append(f"{where}: {text} left out (plots draw off screen under the probe)")
            elif (install := _INSTALL.match(text)) is not None:
                installs.append((where, text, _packages(install["args"], where, text)))
            else:
                raise UserError(f"{where}: {text} is IPython's, not Python, and has no meaning in a script run; "
                                f"give a notebook without it (or its work done in Python), or a .py script")
        cell.source = "\n".join(line for i, line in enumerate(lines) if i not in escapes)
    # the code as the cells have it: no header of metadata, no magics commented out by jupytext
    nb.metadata = {"jupytext": {"notebook_metadata_filter": "-all", "cell_metadata_filter": "-all",
                                "comment_magics": False}}
    code = jupytext.writes(nb, fmt="py:percent")
    return {"sha256": hashlib.sha256(raw).hexdigest(), "code": code,
            "code_sha256": hashlib.sha256(code.encode()).hexdigest(), "left_out": left_out, "installs": installs}


def _escapes(lines: list[str]) -> set[int]:
    """The lines of a cell that are IPython's (magics, shell escapes), those inside a multi-line string aside."""
    found = {i for i, line in enumerate(lines) if _ESCAPE.match(line)}
    if not found:
        return found
    # tokenize the cell with those lines as ``pass``: a line inside a string token spanning lines is the string's
    text = "\n".join(line[:len(line) - len(line.lstrip())] + "pass" if i in found else line
                     for i, line in enumerate(lines))
    try:
        strings = [(t.start[0], t.end[0]) for t in tokenize.generate_tokens(io.StringIO(text + "\n").readline)
                   if t.type == tokenize.STRING and t.end[0] > t.start[0]]
    except (tokenize.TokenError, SyntaxError):       # the cell is not Python either way: the run says so
        return found
    return {i for i in found if not any(start < i + 1 <= end for start, end in strings)}


def _packages(args: str, where: str, text: str) -> list[str]:
    """The package names an install line gives, or its refusal where it installs from elsewhere."""
    words = shlex.split(args)
    try:
        if any(w.split("=")[0] in _OPTIONS_WITH_VALUES for w in words):
            raise InvalidRequirement(text)
        return [Requirement(w).name for w in words if not w.startswith("-")]
    except InvalidRequirement:
        raise UserError(f"{where}: {text} installs from somewhere other than a package index by name, which a run "
                        f"never does; give the packages by name with --require FRAMEWORK=NAME or in a "
                        f"requirements.txt beside the notebook, or give a .py script") from None


def for_spec(converted: dict[str, Any], framework: str, requirement_lines: tuple[str, ...],
             locked: Iterable[str]) -> dict[str, Any]:
    """The spec's ``script.notebook``: each install line left out and declared where the script's requirements
    (``requirement_lines``, already settled) or the framework's lock (``locked``: the names it pins) name every
    package it installs (names compared as pip does); refused, naming its cell and the --require that gives them,
    where not."""
    def key(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()
    said = []
    if converted["installs"]:
        have = {key(Requirement(line.split(" --hash")[0]).name) for line in requirement_lines} | set(locked)
        for where, text, packages in converted["installs"]:
            missing = [p for p in packages if key(p) not in have]
            if missing:
                raise UserError(f"{where}: {text} installs packages, which a run never does; give them with "
                                f"--require {framework}={','.join(missing)} (or in a requirements.txt beside the "
                                f"notebook), and the run leaves this line out")
            said.append(f"{where}: {text} left out ({', '.join(packages)}: from the script's requirements or the "
                        f"{framework} lock)")
    return {"sha256": converted["sha256"], "code": converted["code"], "code_sha256": converted["code_sha256"],
            "left_out": converted["left_out"] + said}

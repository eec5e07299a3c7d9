"""A notebook given as a script (``--script tensorflow=tutorial.ipynb``): its code cells, in order, each run as
Jupyter runs it.

jupytext converts it: nbformat (its dependency) reads and checks the file and upgrades an older notebook
format, and the ``py:percent`` text keeps each cell under a ``# %%`` marker with the markdown as comments, so
a traceback's line reads against the notebook. nbconvert's PythonExporter would do the same with a templating
stack (jinja2, bleach, mistune, ...) and IPython to rewrite the magics, which a script cannot run anyway.

IPython's own lines are settled at plan time, by what they mean for a script, each declared with its cell and
line: a line that only shows something (SHOWS_ONLY: ``%matplotlib``, ``%tensorboard``, ``!ls``, ...) is left
out; ``%time`` and ``%%time`` run their statement or cell, ``%timeit`` and ``%%timeit`` run theirs once;
``%env NAME=VALUE`` and ``%cd DIR`` become their Python on the same line (a ``%cd`` that leaves the run's copy
of the notebook's folder is refused); ``!pip install`` or ``%pip install`` is left out where the script's
requirements (--require, or a requirements.txt beside the notebook) or its framework's lock give every package
it names, and refused, naming its cell, where not; any other magic or shell line is refused, naming its cell
and line. A cell whose saved output is an error, or that is tagged ``raises-exception`` (the tag nbval and
nbclient read), is expected to raise it: the spec lists each code cell with its lines in the converted text and
the error it expects, and the probe runs the cells one at a time (reprokit/kits/training_loop/notebook_script.py). The
user's file is never edited: the converted text goes into the spec with its sha256 and the notebook's (both in
the run id), and the probe runs it in a copy of the notebook's folder.
"""
from __future__ import annotations

import hashlib
import io
import json
import posixpath
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
RAISES_TAG = "raises-exception"          # the tag nbval and nbclient read: the cell raises on purpose
# %magic, %%cell magic, !shell, files = !ls (not an expression's continuation line: "% b", "!= b")
_ESCAPE = re.compile(r"^\s*(?:[\w.]+\s*=\s*)?(?:!(?!=)|%%?\w)")
# an IPython line's parts: its indent, a captured result (files = !ls), the escape, the magic or command, the rest
_PARTS = re.compile(r"^(?P<indent>\s*)(?P<capture>[\w.]+\s*=\s*)?(?P<escape>%%|%|!!?)\s*(?P<name>[^\s]*)\s*"
                    r"(?P<args>.*?)\s*$")
_INSTALL = re.compile(r"^\s*[!%]\s*(?:\{sys\.executable\}\s+-m\s+pip|python3?\s+-m\s+pip|pip3?|conda|mamba)"
                      r"\s+install\s+(?P<args>.*)$")
_OPTIONS_WITH_VALUES = {"-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url",
                        "--extra-index-url", "-f", "--find-links", "--target", "-t", "--prefix"}
# Lines that only show something in the notebook: a run leaves them out, declared with why. Keyed by the magic
# (with its argument, where the magic itself does other things too: %load_ext) or the shell command.
SHOWS_ONLY = {
    "%matplotlib": "plots draw off screen under the probe",
    "%load_ext tensorboard": "it loads TensorBoard's view inside the notebook, which a run has no screen for",
    "%reload_ext tensorboard": "it loads TensorBoard's view inside the notebook, which a run has no screen for",
    "%tensorboard": "it shows TensorBoard inside the notebook, which a run has no screen for",
    "%pwd": "it only shows the working folder",
    "!ls": "it only lists files",
    "!cat": "it only shows files",
    "!head": "it only shows files",
    "!tail": "it only shows files",
    "!pwd": "it only shows the working folder",
    "!nvidia-smi": "it only shows the GPUs, which the result's environment records",
    "!nproc": "it only shows the CPU count, which the result's environment records",
    "!lscpu": "it only shows the CPU, which the result's environment records",
    "!free": "it only shows the memory",
    "!df": "it only shows the disks",
}
_DOES_MORE = re.compile(r"[|;&<>`]|\$\(")          # a shell line that pipes, redirects or chains does more than show
_EXPANDS = re.compile(r"[${]")                     # IPython's $name and {expression} in a magic's arguments
_TIMEIT_OPTIONS = re.compile(r"^(?:-[nrp]\s*\d+\s*|-[tcqo]\s+)*")
LEFT_OUT, HONOURED = "left_out", "honoured"


def is_notebook(path: str | Path) -> bool:
    return Path(path).suffix == SUFFIX


def source(path: Path) -> bytes:
    """What the plan's scans read as the script's code: a notebook's converted text, any other file as it is."""
    return convert(path)["code"].encode() if is_notebook(path) else path.read_bytes()


def convert(path: Path) -> dict[str, Any]:
    """The notebook's code cells as one script: the notebook's sha256, the converted text and its sha256, what was
    left out and what runs as its Python (declared), its code cells (each one's lines and expected error), and its
    install lines (where, text, package names) for ``for_spec``."""
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
    said: dict[str, list[str]] = {LEFT_OUT: [], HONOURED: []}
    installs, cells, cwd = [], [], ["."]          # cwd: where the %cd lines so far have taken the run
    for number, cell in enumerate(nb.cells, 1):
        if cell.cell_type != "code":
            continue
        lines = cell.source.splitlines()
        for i in sorted(_escapes(lines)):        # in order: each %cd counts from where the one before took the run
            where, text = f"{name}, cell {number} (counting every cell from 1), line {i + 1}", lines[i].strip()
            if (install := _INSTALL.match(text)) is not None:
                installs.append((where, text, _packages(install["args"], where, text)))
                lines[i] = _left_out(lines[i])
                continue
            lines[i], declaration, kind = _settle(lines[i], i == 0, where, cwd)
            said[kind].append(declaration)
        cell.source = "\n".join(lines)
        cells.append((number, lines, _expected(cell)))
    # the code as the cells have it: no header of metadata, no magics commented out by jupytext
    nb.metadata = {"jupytext": {"notebook_metadata_filter": "-all", "cell_metadata_filter": "-all",
                                "comment_magics": False}}
    code = jupytext.writes(nb, fmt="py:percent")
    return {"sha256": hashlib.sha256(raw).hexdigest(), "code": code,
            "code_sha256": hashlib.sha256(code.encode()).hexdigest(), "left_out": said[LEFT_OUT],
            "honoured": said[HONOURED], "cells": _cell_lines(code, cells), "installs": installs}


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


def _left_out(line: str) -> str:
    """A line left out, as the converted text shows it: a ``pass`` on its line (a block it ends stays a block,
    and the cell's later lines keep their numbers), with the line as a comment."""
    return f"{line[:len(line) - len(line.lstrip())]}pass  # {line.strip()}"


def _settle(line: str, first: bool, where: str, cwd: list[str]) -> tuple[str, str, str]:
    """An IPython line other than an install, as a run takes it: the Python it becomes on its line, its
    declaration, and whether that is LEFT_OUT or HONOURED; refused in one sentence where it has no meaning in a
    script run."""
    parts = _PARTS.match(line)
    assert parts is not None          # _ESCAPE found the line
    indent, escape, name, args, text = parts["indent"], parts["escape"], parts["name"], parts["args"], line.strip()
    if parts["capture"] is None:
        if name in ("time", "timeit") and (escape == "%" or (escape == "%%" and first)):
            statement = _TIMEIT_OPTIONS.sub("", args, count=1) if name == "timeit" else args
            what = ("the cell" if escape == "%%" else "its statement") + (" once" if name == "timeit" else "")
            # %%timeit's line holds the setup statement, run before the cell as IPython runs it
            return (indent + statement if statement else _left_out(line)), \
                f"{where}: {text} runs {what}, untimed (the probe times the run)", HONOURED
        if escape == "%" and name == "env":
            return _env(indent, args, text, where)
        if escape == "%" and name == "cd":
            return _cd(indent, args, text, where, cwd)
        key = f"%{name}" if escape == "%" else f"!{name}" if escape.startswith("!") and not _DOES_MORE.search(args) \
            else None
        why = key and (SHOWS_ONLY.get(key) or SHOWS_ONLY.get(f"{key} {args.split(' ')[0]}"))
        if why:
            return _left_out(line), f"{where}: {text} left out ({why})", LEFT_OUT
    raise UserError(f"{where}: {text} is IPython's, not Python, and has no meaning in a script run; give a "
                    f"notebook without it (or its work done in Python), or a .py script")


def _env(indent: str, args: str, text: str, where: str) -> tuple[str, str, str]:
    """``%env NAME=VALUE`` or ``%env NAME VALUE``, split as IPython splits it, as its os.environ line; ``%env`` or
    ``%env NAME`` only shows."""
    if "=" not in args and len(args.split()) < 2:
        return _left_out(indent + text), f"{where}: {text} left out (it only shows the environment)", LEFT_OUT
    _refuse_expansion(args, text, where)
    variable, value = (part.strip() for part in args.split("=" if "=" in args else None, 1))
    return (f"{indent}__import__('os').environ[{variable!r}] = {value!r}  # {text}",
            f"{where}: {text} sets {variable}={value} in the run's environment, at that line", HONOURED)


def _cd(indent: str, args: str, text: str, where: str, cwd: list[str]) -> tuple[str, str, str]:
    """``%cd DIR`` (or ``%cd -q DIR``) as its os.chdir line, where DIR is inside the run's copy of the notebook's
    folder, counting from where the earlier %cd lines took it (``cwd``, updated)."""
    _refuse_expansion(args, text, where)
    try:
        words = [word for word in shlex.split(args) if word != "-q"]
    except ValueError:           # an unclosed quote: IPython would refuse it too
        words = []
    # no folder (home), the one before (-), a bookmark (-b), home's or an absolute one: outside, as ../ is
    there = posixpath.normpath(posixpath.join(cwd[0], words[0])) \
        if len(words) == 1 and not words[0].startswith(("~", "/", "-")) else ".."
    if there == ".." or there.startswith("../"):
        raise UserError(f"{where}: {text} leaves the run's copy of the notebook's folder, the only folder a run "
                        f"has; move the notebook into the folder it works in, or show the run its data where the "
                        f"notebook reads it with --data WHERE=FOLDER")
    cwd[0] = there
    return (f"{indent}__import__('os').chdir({words[0]!r})  # {text}",
            f"{where}: {text} changes the working folder to {there if there == '.' else './' + there} of the "
            f"run's copy of the notebook's folder, at that line", HONOURED)


def _refuse_expansion(args: str, text: str, where: str) -> None:
    if _EXPANDS.search(args):
        raise UserError(f"{where}: {text} takes a value from Python ($name or {{expression}}), which is known only "
                        f"as the notebook runs; write the value out, or do it in Python (os.environ, os.chdir)")


def _expected(cell: Any) -> dict[str, Any]:
    """The error a code cell raises on purpose: its saved error output's type and first line, and whether it is
    tagged raises-exception."""
    saved = next((out for out in cell.get("outputs", []) if out.get("output_type") == "error"), None)
    return {"error": saved and saved.get("ename"),
            "error_value": saved and (str(saved.get("evalue", "")).splitlines() or [""])[0][:200],
            "tagged": RAISES_TAG in cell.metadata.get("tags", [])}


def _cell_lines(code: str, cells: list[tuple[int, list[str], dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each code cell that has lines, with its first and last line in the converted text (counting from 1):
    jupytext writes a code cell as a ``# %%`` line and its source as it is, in order; a cell's own line may read
    ``# %%`` too, hence the search for the marker followed by the whole cell."""
    lines, at, found = code.splitlines(), 0, []
    for number, source, expected in cells:
        if not source:
            continue
        at = next((i + 1 for i in range(at, len(lines))
                   if lines[i] == "# %%" and lines[i + 1:i + 1 + len(source)] == source), -1)
        if at < 0:
            raise RuntimeError(f"jupytext wrote cell {number} otherwise than as its source")
        found.append({"number": number, "first_line": at + 1, "last_line": at + len(source), **expected})
        at += len(source)
    return found


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
            "left_out": converted["left_out"] + said, "honoured": converted["honoured"], "cells": converted["cells"]}

"""Every file a docstring, a comment or a page points to (``reprokit/plan/matrix.py``, ``execute/loop.py``) is there:
a module moved or removed leaves no pointer to where it was. A pointer is a path of the project's own folders ending
in .py, whole or from a package's subfolder; a path with a placeholder (``reprokit/kits/<fw>_kit/probe.py``) is a pattern."""
from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

from checkout import REPO

POINTER = re.compile(r"(?<![\w./<{*-])((?:[A-Za-z_][\w-]*/)+[A-Za-z_]\w*\.py)\b")
# written as users write them, and the seeds' posts: their text is not the project's
NOT_OURS = ("tests/corpus/", "tests/user_scripts/", "reprokit/kits/experiments/", "benchmarks/probe_scripts/", "reports/")


def _files() -> list[str]:
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.split("\n")
    return [f for f in listed if f and (REPO / f).is_file()]


def _prose(path: Path) -> str:
    """A Python file's docstrings and comments (its code's strings may name paths of a test's own making); a page
    whole."""
    text = path.read_text()
    if path.suffix == ".md":
        return text
    docs = [ast.get_docstring(node) or "" for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    comments = [tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                if tok.type == tokenize.COMMENT]
    return "\n".join(docs + comments)


def test_every_module_a_docstring_comment_or_page_points_to_exists():
    files = _files()
    tops = {f.split("/")[0] for f in files if "/" in f}
    subfolders = {f.removeprefix(root).split("/")[0] for f in files for root in ("reprokit/", "reprokit/kits/")
                  if f.startswith(root) and f.count("/") > root.count("/")}      # the host's packages and the kits'
    sources = [f for f in files if f.endswith((".py", ".md")) and not f.startswith(NOT_OURS)]
    assert len(sources) > 300
    stale = []
    for name in sources:
        for pointer in POINTER.findall(_prose(REPO / name)):
            if pointer.split("/")[0] not in tops | subfolders:
                continue                    # another project's path (torch/nn/modules/module.py)
            if not any(f == pointer or f.endswith(f"/{pointer}") for f in files):
                stale.append(f"{name}: {pointer}")
    assert not stale, "pointers to files that are not there:\n" + "\n".join(sorted(set(stale)))

"""The house in figures: each module's lines, the comment and docstring lines, and the modules over the 450
lines a reader holds (tests/test_layering.py fails on those). Run it on two checkouts to compare them.

    python scripts/house_counts.py [CHECKOUT] [--list]
"""
from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

# reprokit/ holds the kits (reprokit/kits/); "kits" is where a checkout from before that move kept them, so that
# two checkouts compare across it.
ROOTS = ("reprokit", "kits", "scripts", "faults")
MAX_LINES = 450


def modules(root: Path) -> list[Path]:
    """Python files and `#!/usr/bin/env python` scripts, the seeds' posted scripts aside (users' code)."""
    return sorted(p for d in ROOTS for p in (root / d).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and "experiments" not in p.parts
                  and (p.suffix == ".py" or (not p.suffix and p.read_bytes().startswith(b"#!/usr/bin/env python"))))


def docstring_lines(tree: ast.AST) -> int:
    return sum(node.body[0].end_lineno - node.body[0].lineno + 1 for node in ast.walk(tree)
               if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
               and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
               and isinstance(node.body[0].value.value, str) and node.body[0].end_lineno is not None)


def main(root: Path, listing: bool) -> None:
    paths = modules(root)
    sizes = {p: len(p.read_text().splitlines()) for p in paths}
    comments = sum(t.type == tokenize.COMMENT for p in paths
                   for t in tokenize.generate_tokens(io.StringIO(p.read_text()).readline))
    docs = sum(docstring_lines(ast.parse(p.read_text())) for p in paths)
    over = sorted(((n, p) for p, n in sizes.items() if n > MAX_LINES), reverse=True)
    print(f"modules {len(paths)}, lines {sum(sizes.values())}, comment lines {comments}, docstring lines {docs}, "
          f"over {MAX_LINES} lines: {len(over)}")
    for n, p in (sorted(((n, p) for p, n in sizes.items()), reverse=True) if listing else over):
        print(f"  {n:>4} {p.relative_to(root)}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--list"]
    main(Path(args[0]) if args else Path(__file__).resolve().parents[1], "--list" in sys.argv)

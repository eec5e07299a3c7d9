"""Markdown pieces: escaping text that came from a run, code fences, tables with short cells."""
from __future__ import annotations

from tabulate import tabulate

CELL = 120          # a table cell longer than this is cut; the full text lives in details.md


def md(text: object) -> str:
    """Escape text that came from a run (device names, messages) for a markdown table cell."""
    s = str(text).replace("\r", " ").replace("\n", " ")
    for ch in "\\`*_[]<>|#":
        s = s.replace(ch, "\\" + ch)
    return s


def fenced(lines: list[str]) -> str:
    """A code block whose fence is longer than any run of backticks inside it."""
    ticks = "`" * max(3, 1 + max((_longest_backticks(line) for line in lines), default=0))
    return "\n".join([ticks + "text", *lines, ticks])


def _longest_backticks(line: str) -> int:
    best = run = 0
    for ch in line:
        run = run + 1 if ch == "`" else 0
        best = max(best, run)
    return best


def short(text: str, limit: int = CELL) -> str:
    """Plain text cut at a word to at most ``limit`` characters, marked with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "…"


def table(rows: list[list[str]], headers: list[str]) -> str:
    """A GitHub table; cells are expected escaped and short already."""
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def anchor(heading: str) -> str:
    """The fragment GitHub gives a heading: lower case, spaces to dashes, punctuation dropped."""
    kept = "".join(ch for ch in heading.lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")

"""Markdown pieces: escaping text that came from a run, code fences, tables with short cells."""
from __future__ import annotations

from typing import Any

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


def device_label(results: list[dict[str, Any]]) -> str:
    """The device the runs asked for and, where a script's model stayed on the CPU (model-not-on-gpu), that it
    trained there: that run's figures are the CPU's, not the GPU's."""
    asked = ", ".join(sorted({r["spec"].get("device", "cpu") for r in results}))
    on_cpu = sorted({r["framework"] for r in results if on_cpu_instead(r)})
    if not on_cpu:
        return asked
    return f"{asked}; {', '.join(on_cpu)} trained on the CPU, its model never on the GPU (model-not-on-gpu)"


def on_cpu_instead(r: dict[str, Any]) -> bool:
    """A GPU run whose script kept its model on the CPU, measured there (reprokit/kits/probe.py)."""
    return any(f.get("code") == "model-not-on-gpu" for f in r.get("findings") or [])

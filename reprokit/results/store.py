"""Finished results, by run id: the resume cache and the report's own copies."""
from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kits.common.files import write_json_atomic
from reprokit.results import results


class Store:
    """``root/<run_id>.json``: one validated result per run, written the moment a run ends."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, run_id: str) -> Path:
        return self.root / f"{run_id}.json"

    def get(self, run_id: str) -> dict[str, Any] | None:
        """A finished run's result, or None (a missing, unreadable or invalid file counts as unfinished)."""
        try:
            result = json.loads(self.path(run_id).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return None if results.problems(result) else result

    def put(self, result: dict[str, Any]) -> Path:
        path = self.path(result["run_id"])
        write_json_atomic(path, result)
        return path

    def all(self) -> list[dict[str, Any]]:
        """Every valid result here; files that fail validation are reported, not used."""
        out = []
        with _no_cyclic_gc():
            for path in sorted(self.root.glob("*.json")):
                result = json.loads(path.read_text())
                problem = results.problems(result)
                if problem:
                    raise ValueError(f"{path} is not a valid result file: {problem}")
                out.append(result)
        return out


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Loading many files makes millions of objects in a growing heap, which the cyclic collector scans
    again and again (two thirds of the time for 1,000 results). Parsed JSON holds no cycles, so the
    collector is paused while loading, and what was loaded is frozen out of later scans (the report
    that reads it would pay the same again); reference counting still frees it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()

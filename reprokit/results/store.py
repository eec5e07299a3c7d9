"""Finished results, by run id: the resume cache and the report's own copies.

A damaged file in the state folder (cut short by a crash or a full disk, or failing the schema) is
set aside into quarantine/ and named once, and the run it stood for runs again. A report folder
is evidence someone sent: its damaged files are named and skipped, never moved (``readable``).
"""
from __future__ import annotations

import gc
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprokit.kits.contract.files import clean_stale, write_json_atomic
from reprokit.kits.contract.result_header import READS, SCHEMA
from reprokit.results import quarantine, results, safe_names, spec_types

RERUN = "it will run again"


@dataclass(frozen=True)
class Refused:
    """A result file that could not be used, and why (one clause: "unterminated JSON", ...)."""
    path: Path
    why: str

    def sentence(self, reader: str) -> str:
        return f"{reader}: {self.path} is not a result this kit can read ({self.why}); skipped it"


class Store:
    """``root/<run_id>.json``: one validated result per run, written the moment a run ends."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, run_id: str) -> Path:
        return self.root / f"{run_id}.json"

    def get(self, run_id: str) -> dict[str, Any] | None:
        """A finished run's result, or None: missing, or damaged and set aside (the run runs again)."""
        path = self.path(run_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        result, why = read(data, run_id)
        if why is not None:
            quarantine.set_aside(path, f"result {run_id}", why, RERUN)
        return result

    def put(self, result: dict[str, Any]) -> Path:
        path = self.path(result["run_id"])
        write_json_atomic(path, result)
        return path

    def all(self) -> list[dict[str, Any]]:
        """Every valid result here; damaged files are set aside (their runs run again), and the temporaries
        of writers that died are removed."""
        clean_stale(self.root)
        found, refused = self.readable()
        for bad in refused:
            quarantine.set_aside(bad.path, f"result {bad.path.stem}", bad.why, RERUN)
        return found

    def evidence(self, reader: str) -> tuple[list[dict[str, Any]], list[Refused]]:
        """A report folder's valid results: each damaged file named in one line and skipped, never moved (it is
        evidence someone sent), and how many were read when any was not."""
        found, refused = self.readable()
        if found and refused:           # else the reader refuses the folder in one sentence (none_read)
            for bad in refused:
                print(bad.sentence(reader), file=sys.stderr)
            print(f"{reader}: read {len(found)} of {len(found) + len(refused)} result files in {self.root}",
                  file=sys.stderr)
        return found, refused

    def readable(self) -> tuple[list[dict[str, Any]], list[Refused]]:
        """The valid results here and the files that are not, touching nothing (a report folder's reader)."""
        out, refused = [], []
        with _no_cyclic_gc():
            for path in sorted(self.root.glob("*.json")):
                try:
                    data = path.read_bytes()
                except FileNotFoundError:           # set aside by another command meanwhile
                    continue
                except OSError as exc:
                    refused.append(Refused(path, f"unreadable: {exc.strerror}"))
                    continue
                result, why = read(data, path.stem)
                if result is None:
                    refused.append(Refused(path, why or "unreadable"))
                else:
                    out.append(result)
        return out, refused


def none_read(refused: list[Refused]) -> str:
    """Why none of a folder's result files can be read, as a clause: the one file's reason, the reason all share
    (an older schema's version, as a folder another kit wrote has), or the first file's."""
    first = f"{refused[0].path.name}: {refused[0].why}"
    if len(refused) == 1:
        return first
    reasons = {bad.why for bad in refused}
    return f"all {len(refused)}: {reasons.pop()}" if len(reasons) == 1 else f"{first}, and {len(refused) - 1} more"


def read(data: bytes, stem: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """(result, None) for a valid result file's bytes, else (None, why) in a few words. ``stem``, the file's
    name without .json, must be the result's run id (a result copied under another name is not that run's)."""
    try:
        result = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, quarantine.why_unreadable(data)
    if not isinstance(result, dict):
        return None, f"a JSON {type(result).__name__}, not a result object"
    schema = result.get("schema")
    if isinstance(schema, str) and schema not in READS and schema.startswith(SCHEMA.split("/")[0] + "/"):
        return None, f"schema {schema}, and this kit reads {' and '.join(READS)}"
    problem = results.problems(result) or spec_types.problem(result)
    if problem:
        return None, f"fails the result schema: {problem}"
    for field in ("experiment", "variant"):
        name_problem = safe_names.problem(result[field])
        if name_problem:
            return None, f"its {field} {name_problem}"
    if stem is not None and stem != result["run_id"]:
        return None, f"it holds run {result['run_id']}, not {stem}"
    return result, None


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

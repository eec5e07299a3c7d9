"""Result files: validate against the versioned schema and build failures."""
from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import fastjsonschema
import jsonschema

from reprokit import resources
from reprokit.kits.contract.names import schema_with_registry
from reprokit.kits.contract.result_header import header


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((resources.schemas() / "result.schema.json").read_text())
    return schema_with_registry(schema)


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(_schema())


@lru_cache(maxsize=1)
def _fast() -> Callable[[Any], Any]:
    """The same schema compiled to Python (its keywords are all draft-07's): 20x faster on a valid file,
    which is what a report of 1,000 results reads; jsonschema words any violation."""
    return fastjsonschema.compile({k: v for k, v in _schema().items() if k != "$schema"})


def _series(result: dict[str, Any]) -> str | None:
    """The long per-step series, checked in plain Python: item by item in the schema costs ~1 s per 1,000 files."""
    # The types seen, gathered in C, first (10,000 files hold millions of items): JSON's own types pass at once, and
    # anything else is judged item by item.
    values = result.get("timing", {}).get("step_s", {}).get("values", [])
    if not {*map(type, values)} <= {int, float} and not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "timing/step_s/values: every item must be a number"
    pairs = result.get("memory", {}).get("over_steps", [])
    plain = ({*map(type, pairs)} <= {list} and {*map(len, pairs)} <= {2}
             and {*map(type, itertools.chain(*pairs))} <= {int})
    if not plain and not all(isinstance(p, list) and len(p) == 2 and all(type(v) is int for v in p) for p in pairs):
        return "memory/over_steps: every item must be a [step, bytes] pair of integers"
    return None


def problems(result: Any) -> str | None:
    """The first schema violation as one readable line, or None when valid."""
    try:
        _fast()(result)
        error = None
    except fastjsonschema.JsonSchemaException:
        error = jsonschema.exceptions.best_match(_validator().iter_errors(result))
    if error is None:
        return _series(result) if isinstance(result, dict) else None
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"{where}: {error.message}"


def failure(spec: dict[str, Any], kind: str, message: str, log_tail: list[str], wall_s: float,
            launcher: dict[str, Any]) -> dict[str, Any]:
    """A result for a run that produced no valid result of its own."""
    result = header(spec, "failed", {"kind": kind, "message": message, "log_tail": list(log_tail)})
    result["launcher"] = {**launcher, "wall_s": wall_s}
    return result

"""Result files: validate against the versioned schema and build failures."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import jsonschema

from kits.common.report import header


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(resources.files("reprokit").joinpath("schemas/result.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def problems(result: object) -> str | None:
    """The first schema violation as one readable line, or None when valid."""
    error = jsonschema.exceptions.best_match(_validator().iter_errors(result))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"{where}: {error.message}"


def failure(spec: dict, kind: str, message: str, log_tail: list[str], wall_s: float,
            launcher: dict) -> dict:
    """A result for a run that produced no valid result of its own."""
    result = header(spec, "failed", {"kind": kind, "message": message, "log_tail": list(log_tail)})
    result["launcher"] = {**launcher, "wall_s": wall_s}
    return result

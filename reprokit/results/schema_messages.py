"""One readable sentence for a JSON-schema violation: the key, what is wrong, what is allowed."""
from __future__ import annotations

from typing import Any

import jsonschema


def describe(error: jsonschema.ValidationError, parts: list[Any], hints: dict[str, str] | None = None) -> str:
    """'key: problem; allowed ...' for the error at ``parts`` (its path, made relative by the caller).

    ``hints`` adds text when a named key is missing (e.g. the units a figure may use).
    """
    key = ".".join(str(p) for p in parts) or "(top level)"
    schema = error.schema if isinstance(error.schema, dict) else {}
    v = error.validator
    # what the instance and the failing keyword's value are depends on the keyword (its branch below)
    instance: Any = error.instance
    value: Any = error.validator_value

    def child(name: str) -> str:
        return ".".join(filter(None, [".".join(str(p) for p in parts), name]))

    if v == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(set(instance) - set(allowed))
        return f"{child(extra[0] if extra else '?')}: unknown key; allowed here: {', '.join(allowed)}"
    if v == "required":
        missing = [k for k in value if k not in instance]
        first = missing[0] if missing else "?"
        hint = (hints or {}).get(first, "")
        return f"{child(first)}: missing; required here: {', '.join(value)}{hint}"
    if v == "enum":
        return f"{key}: {instance!r} is not allowed; allowed: {', '.join(map(str, value))}"
    if v == "const":
        return f"{key}: must be {value!r}"
    if v == "type":
        return f"{key}: expected {value}, got {type(instance).__name__} {instance!r}"
    if v in ("minItems", "maxItems") and schema.get("minItems") == schema.get("maxItems") == 2:
        return f"{key}: must be a pair [low, high], got {instance!r}"
    if v in ("exclusiveMinimum", "minimum"):
        op = ">" if v == "exclusiveMinimum" else ">="
        return f"{key}: must be {op} {value}, got {instance!r}"
    if v == "pattern":
        return f"{key}: {instance!r} must match {value}"
    return f"{key}: {error.message}"

"""One readable sentence for a JSON-schema violation: the key, what is wrong, what is allowed."""
from __future__ import annotations

import jsonschema


def describe(error: jsonschema.ValidationError, parts: list, hints: dict[str, str] | None = None) -> str:
    """'key: problem; allowed ...' for the error at ``parts`` (its path, made relative by the caller).

    ``hints`` adds text when a named key is missing (e.g. the units a figure may use).
    """
    key = ".".join(str(p) for p in parts) or "(top level)"
    schema = error.schema if isinstance(error.schema, dict) else {}
    v = error.validator

    def child(name: str) -> str:
        return ".".join(filter(None, [".".join(str(p) for p in parts), name]))

    if v == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return f"{child(extra[0] if extra else '?')}: unknown key; allowed here: {', '.join(allowed)}"
    if v == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        first = missing[0] if missing else "?"
        hint = (hints or {}).get(first, "")
        return f"{child(first)}: missing; required here: {', '.join(error.validator_value)}{hint}"
    if v == "enum":
        return f"{key}: {error.instance!r} is not allowed; allowed: {', '.join(map(str, error.validator_value))}"
    if v == "const":
        return f"{key}: must be {error.validator_value!r}"
    if v == "type":
        return f"{key}: expected {error.validator_value}, got {type(error.instance).__name__} {error.instance!r}"
    if v in ("minItems", "maxItems") and schema.get("minItems") == schema.get("maxItems") == 2:
        return f"{key}: must be a pair [low, high], got {error.instance!r}"
    if v in ("exclusiveMinimum", "minimum"):
        op = ">" if v == "exclusiveMinimum" else ">="
        return f"{key}: must be {op} {error.validator_value}, got {error.instance!r}"
    if v == "pattern":
        return f"{key}: {error.instance!r} must match {error.validator_value}"
    return f"{key}: {error.message}"

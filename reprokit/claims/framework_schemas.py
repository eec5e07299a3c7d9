"""Per-framework properties in a JSON schema: an object marked PER_FRAMEWORK has one property per registered
framework (a builder, a hook, a declared difference's side, a script), whose schema is the marker's value.

The committed experiment schema lists the built-in frameworks' (claims.write_schema); reprokit/plan/experiments.py
adds the registry's others when it loads it, as names.schema_with_registry does for the framework enums."""
from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from reprokit.kits.contract.names import schema_objects

PER_FRAMEWORK = "x-per-framework"


def fill_per_framework(schema: Any, names: Iterable[str]) -> Any:
    """``schema`` with a property of each of ``names`` in every object marked PER_FRAMEWORK, in place."""
    names = list(names)
    for obj in schema_objects(schema):
        if PER_FRAMEWORK in obj:
            obj["properties"].update({fw: copy.deepcopy(obj[PER_FRAMEWORK]) for fw in names})
    return schema

"""A result's spec and the other fields the report reads, checked against their types (the Store's reader asks).

The result schema checks a result's shape and the figures it is judged by; reprokit/kits/contract/spec.parse checks a
spec's objects and their missing and unknown fields. Neither types every value the report and --from read
(a spec's text and numbers, the environment's names): a result the kit wrote has them right, one from a
report folder someone sent may not, and would then end in a traceback deep in the report.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable
from typing import Any

from reprokit.kits.contract.pitfalls import Pitfalls
from reprokit.kits.contract.spec import Numerics, RunSpec, Script, ScriptSpec, read_older

# dotted field -> its types, where the result has the field (the schema says which it must have)
READ: dict[str, tuple[type, ...]] = {
    **{f"environment.{k}": (str,) for k in ("framework", "framework_version", "python", "device", "device_name")},
    **{f"environment.{k}": (dict, type(None)) for k in ("cpu_threads", "build", "precision")},
    "environment.host": (dict,), "environment.host.hostname": (str,), "environment.gpus": (list, type(None)),
    **{f"provenance.{k}": (str, type(None)) for k in ("code_commit", "lock_sha256", "image", "flavor", "lock")},
    "provenance.code_dirty": (bool,), "provenance.data_sha256": (str,), "launcher.co_load": (list,),
    "model.parameters.total": (int,), "model.parameters.trainable": (int,), "model.layers": (list,),
    "probe.host_syncs.per_training_step": (int, float), "probe.host_syncs.meaning": (str,),
    "launcher.image": (dict, type(None)), "launcher.image.ref": (str, type(None)), "launcher.image.id": (str,),
    "launcher.image.base_digest": (str, type(None)),
}
# spec fields the kit writes only where set (RunSpec.to_dict), so older specs read as they were
WRITTEN_WHERE_SET = {(Numerics, "channels_last"), (Script, "mounts"), (Script, "notebook"), (Script, "module"),
                     (Script, "left_out"), (Script, "launcher"), (ScriptSpec, "devices"), (RunSpec, "devices")}
# fields that must be there where their parent is
NAMED = ("environment.host.hostname", "launcher.image.ref", "launcher.image.id")
# lists, and the type of each of their items
ITEMS: dict[str, type] = {"environment.gpus": dict, "launcher.co_load": dict, "spec.differences": dict,
                          "model.layers": str}


def problem(result: dict[str, Any]) -> str | None:
    """The first field of a schema-valid result whose value is not of the type the report reads, as
    "spec.data.sha256 must be str, got 12", or None."""
    for path, kinds in READ.items():
        found, value = _get(result, path)
        if path in NAMED and _get(result, path.rsplit(".", 1)[0])[0] and not found:
            return f"{path} is missing"
        if found and not (isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)):
            return f"{path} must be {' or '.join(k.__name__ for k in kinds)}, got {value!r:.60}"
    for path, kind in ITEMS.items():
        found, value = _get(result, path)
        if found and isinstance(value, list) and not all(isinstance(v, kind) for v in value):
            return f"{path}: every item must be {'an object' if kind is dict else 'text'}"
    for i, item in enumerate(result["spec"].get("differences") or []):
        if isinstance(item, dict) and not all(isinstance(item.get(k), str) for k in ("field", "why")):
            return f"spec.differences.{i} must name its field and why, each as text"
    return spec_problem(ScriptSpec if result["spec"].get("source") == "script" else RunSpec, result["spec"])


def _get(doc: Any, path: str) -> tuple[bool, Any]:
    for key in path.split("."):
        if not isinstance(doc, dict) or key not in doc:
            return False, None
        doc = doc[key]
    return True, doc


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind, localns={"Pitfalls": Pitfalls})


@functools.cache
def _fields(kind: type) -> tuple[tuple[str, Any, type | None, Callable[[Any], bool]], ...]:
    """Each field's name, type hint, nested spec type (or None) and value check, worked out once per spec type: a
    report of 10,000 results checks 10,000 specs."""
    return tuple((name, hint, None if typing.get_origin(hint) is list else
                  next((t for t in typing.get_args(hint) or (hint,)
                        if isinstance(t, type) and dataclasses.is_dataclass(t)), None), _check(hint))
                 for name, hint in _hints(kind).items())


def spec_problem(kind: type, value: Any, path: str = "spec") -> str | None:
    """The first field of a spec (as JSON) that is not what the typed spec of this kind declares: missing (the
    plan writes every field), unknown, or of another type; None when the kit could read all of it as it is."""
    if not isinstance(value, dict):
        return f"{path} must be an object, got {value!r:.60}"
    value = read_older(kind, value)            # a result written before builders were keyed by any framework
    unknown = value.keys() - _hints(kind).keys()
    if unknown:
        return f"{path}: unknown field(s) {', '.join(sorted(map(str, unknown)))[:80]}"
    for name, hint, nested, fits in _fields(kind):
        if name not in value:
            if (kind, name) in WRITTEN_WHERE_SET:
                continue
            return f"{path}.{name} is missing (a spec the kit wrote states every field)"
        if hint is Pitfalls:
            if not _check(list[str])(value[name]):
                return f"{path}.{name} must be a list of pitfall names, got {value[name]!r:.60}"
            try:
                Pitfalls.of(value[name], f"{path}.{name}")
            except ValueError as exc:
                return str(exc)[:200]
        elif nested and value[name] is not None:
            found = spec_problem(nested, value[name], f"{path}.{name}")
            if found:
                return found
        elif not fits(value[name]):
            return f"{path}.{name} must be {_shown(hint)}, got {value[name]!r:.60}"
    return None


@functools.cache
def _check(hint: Any) -> Callable[[Any], bool]:
    """Whether a value fits ``hint``, as a function made once per hint (reading the hint is most of the cost)."""
    if hint is Any:
        return lambda value: True
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        options = tuple(_check(h) for h in typing.get_args(hint))
        return lambda value: any(fits(value) for fits in options)
    if hint is type(None):
        return lambda value: value is None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):         # a list's items (a script's mounts)
        return lambda value: spec_problem(hint, value) is None
    origin = typing.get_origin(hint) or hint
    if origin is float:         # a spec's figures are finite: NaN is no size, rate or step
        return lambda value: isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if origin is int:
        return lambda value: isinstance(value, int) and not isinstance(value, bool)
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        each = _check(item)
        return lambda value: isinstance(value, list) and all(each(v) for v in value)
    if origin is dict:
        key, item = typing.get_args(hint) or (Any, Any)
        keys, items = _check(key), _check(item)
        return lambda value: isinstance(value, dict) and all(keys(k) and items(v) for k, v in value.items())
    return lambda value: isinstance(value, origin)


def _shown(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")

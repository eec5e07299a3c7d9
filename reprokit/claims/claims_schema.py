"""The claims schema (``reprokit/schemas/claims.schema.json``) and the files it judges: a claims file found by
name or path, read as TOML and validated against the schema before anything else reads it, the first problem
one sentence naming the file, the claim and the key; and the schema's generated parts, its quantity enum and
every schema's framework enum, as ``claims.write_schema`` writes them.
"""
from __future__ import annotations

import json
import re
import textwrap
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from reprokit import resources
from reprokit.claims.framework_schemas import fill_per_framework
from reprokit.errors import UserError
from reprokit.kits.contract.names import BUILTIN, FRAMEWORK_ENUM, fill_frameworks, schema_with_registry
from reprokit.results import metrics
from reprokit.results.schema_messages import describe
from reprokit.results.units import UNITS

CLAIMS_DIR = resources.claims()
SCHEMA = resources.schemas() / "claims.schema.json"
# The other schemas whose framework enums (names.FRAMEWORK_ENUM) are written from the registry's built-in entries.
FRAMEWORK_SCHEMAS = tuple(SCHEMA.with_name(f"{name}.schema.json") for name in ("experiment", "result"))


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(schema_with_registry(json.loads(SCHEMA.read_text())))


_QUANTITY_ENUM = re.compile(r'("quantity": \{\s*"enum": \[)[^\]]*(\])')
_FRAMEWORK_ENUM = re.compile(r'("\$comment": "' + re.escape(FRAMEWORK_ENUM) + r'",\s*"enum": \[)[^\]]*(\])')


def schema_text(text: str) -> str:
    """The claims schema ``text`` with its quantity enum written from metrics.QUANTITIES and its framework enum
    from the registry's built-in entries, the rest as it is.

    The file stays whole (editors and readers see every quantity) and validation reads it as committed, with the
    frameworks registered through reprokit/kits/contract/names.py's hook added (names.schema_with_registry)."""
    names = textwrap.fill(", ".join(f'"{name}"' for name in metrics.QUANTITIES), 116, initial_indent=" " * 8,
                          subsequent_indent=" " * 8, break_long_words=False, break_on_hyphens=False)
    out, found = _QUANTITY_ENUM.subn(lambda m: f"{m[1]}\n{names}\n      {m[2]}", text, count=1)
    if not found:
        raise ValueError(f"{SCHEMA}: no quantity enum ($defs.quantity.enum) to write")
    frameworks = ", ".join(f'"{fw.name}"' for fw in BUILTIN)
    out, found = _FRAMEWORK_ENUM.subn(lambda m: f"{m[1]}{frameworks}{m[2]}", out)
    if not found:
        raise ValueError(f"{SCHEMA}: no framework enum ($defs.framework) to write")
    return out


def framework_schema_text(text: str) -> str:
    """A JSON schema file (indented by 2, as json.dumps writes it) with its framework enums (marked by
    names.FRAMEWORK_ENUM) and its per-framework properties (marked by framework_schemas.PER_FRAMEWORK) written from the
    registry's built-in entries."""
    builtin = [fw.name for fw in BUILTIN]
    schema = fill_per_framework(fill_frameworks(json.loads(text), builtin), builtin)
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def resolve(name_or_path: str | Path) -> Path:
    """A claims file by name (claims/<name>.toml) or by path."""
    text = str(name_or_path)
    path = Path(text)
    if path.suffix == ".toml" or "/" in text or path.exists():
        if not path.is_file():
            raise UserError(f"{path}: no such claims file")
        return path
    candidate = CLAIMS_DIR / f"{text}.toml"
    if not candidate.is_file():
        known = sorted(p.stem for p in CLAIMS_DIR.glob("*.toml")) if CLAIMS_DIR.is_dir() else []
        raise UserError(f"--claims: no claims file named {text!r}; known: {', '.join(known) or '(none)'} "
                        f"in {CLAIMS_DIR}, or give a path to a .toml file")
    return candidate


def validated(name_or_path: str | Path) -> tuple[Path, dict[str, Any]]:
    """A claims file (by name or path) and its document, valid against the schema; any problem is a UserError
    naming the file, and the claim and key where it is in one."""
    path = resolve(name_or_path)
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML ({exc})") from None
    errors = list(_validator().iter_errors(doc))
    if errors:
        raise UserError(_describe(path, doc, jsonschema.exceptions.best_match(errors)))
    return path, doc


def _describe(path: Path, doc: dict[str, Any], error: jsonschema.ValidationError) -> str:
    parts = list(error.absolute_path)
    where = f"{path}"
    if len(parts) >= 2 and parts[0] == "claim" and isinstance(parts[1], int):
        raw = doc["claim"][parts[1]]
        cid = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
        where += f": claim {cid!r}" if cid else f": claim #{parts[1] + 1}"
        parts = parts[2:]
    unit_hint = "; units allowed: " + ", ".join(UNITS)
    return f"{where}: {describe(error, parts, {'unit': unit_hint})}"

"""Names that become parts of file names (a report's name, an experiment's, a variant's): refused when one
could climb out of its folder (``..``, a slash, a NUL byte) or outgrow a file name, before anything is written."""
from __future__ import annotations

import re

MAX_CHARS = 100        # a name and its neighbours (certificate-<experiment>-<variant>.json) fit 255 bytes
# Letters, digits and . _ + - (a variant may be "+pitfall"), not starting with a dot.
_ALLOWED = re.compile(r"^[A-Za-z0-9_+-][A-Za-z0-9._+-]*$")


def problem(name: object) -> str | None:
    """Why ``name`` cannot be part of a file name, as a clause ("contains a NUL byte"), or None."""
    if not isinstance(name, str):
        return "is not text"
    if not name:
        return "is empty"
    if "\0" in name:
        return "contains a NUL byte"
    if len(name) > MAX_CHARS:
        return f"is {len(name)} characters long, and a name may have {MAX_CHARS}"
    if name in (".", ".."):
        return "would climb out of its folder" if name == ".." else "is the folder itself, not a name"
    if "/" in name or "\\" in name:
        return "is a path, not a name"
    if not _ALLOWED.match(name):
        return "has characters other than letters, digits and . _ + - (or starts with a dot)"
    return None


def report_problem(name: str) -> str | None:
    """Why ``name`` cannot be a report's name, or None: a path under the reports folder (runs/<date>-quick-cpu),
    each of its parts a name."""
    if "\0" in name:
        return "contains a NUL byte"
    if name.startswith("/"):
        return "is an absolute path, not a name under the reports folder"
    parts = name.split("/")
    if len(parts) == 1:
        return problem(name)
    for part in parts:
        why = problem(part)
        if why:
            return f"has a part {part!r} that {why}" if part else "has an empty part"
    return None


def shown(name: str, limit: int = 40) -> str:
    """A name as a message quotes it: its repr, cut short where it is long."""
    return repr(name) if len(name) <= limit else repr(name[:limit]) + "…"

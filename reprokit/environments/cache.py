"""The per-user cache: what is a pure function of its inputs and costs minutes to make, shared by every
clone, nox session and test run of this user (kit environments, certificates). Results never go here."""
from __future__ import annotations

import os
from pathlib import Path


def root() -> Path:
    """$REPROKIT_CACHE, else $XDG_CACHE_HOME/reprokit, else ~/.cache/reprokit (as pip and pre-commit place theirs)."""
    if os.environ.get("REPROKIT_CACHE"):
        return Path(os.environ["REPROKIT_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "reprokit"

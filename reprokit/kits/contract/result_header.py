"""The head of every result file, which the host reads to know a result: its schema and its identity.

Standard library only: host and kits import it.
"""
from __future__ import annotations

from typing import Any

SCHEMA = "reprokit.result/2"
# what this kit reads: /2 adds ``processes`` (each rank, worker and replica of a run: reprokit/kits/ranks/gather.py)
READS = ("reprokit.result/1", SCHEMA)


def header(spec: dict[str, Any], status: str, failure: dict[str, Any] | None) -> dict[str, Any]:
    """The result's identity, with the spec as the host wrote it (JSON)."""
    return {
        "schema": SCHEMA,
        "run_id": spec["run_id"],
        "experiment": spec["experiment"],
        "variant": spec["variant"],
        "framework": spec["framework"],
        "profile": spec["profile"],
        "repeat": spec["repeat"],
        "status": status,
        "failure": failure,
        "spec": spec,
    }


# How a result names the kit's own input path (``effective.input``): the ablation tells it from a framework's loader.
KIT_INPUT = "the kit's batches of the prepared arrays, resized and scaled on the device"

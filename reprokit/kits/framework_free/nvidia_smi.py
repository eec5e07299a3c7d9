"""nvidia-smi, asked only for fields this driver knows, read leniently (standard library only).

Field names change across drivers: ``clocks_throttle_reasons.*`` became ``clocks_event_reasons.*``
(the old name stays an alias from R535 on), and ``compute_cap`` is missing before R510.
``nvidia-smi --help-query-gpu`` lists what the installed driver accepts, so each wanted field
names its alternatives and the first one the driver lists is queried. Values the driver cannot
give (``[N/A]``, ``N/A``, ``[Not Supported]``, ``[Unknown Error]``...) read as None. Both the kit
and the host use this module, so it imports nothing outside the standard library.
"""
from __future__ import annotations

import csv
import re
import shutil
import subprocess
from functools import cache
from typing import Any

# what a GPU is: one row per GPU of --query-gpu, keyed by our names
FACTS = {"index": ("index",), "uuid": ("uuid", "gpu_uuid"), "name": ("name", "gpu_name"),
         "driver": ("driver_version",), "compute_capability": ("compute_cap",),
         "memory_mib": ("memory.total",), "pci_bus_id": ("pci.bus_id", "gpu_bus_id")}
# how it is doing: clocks, temperature, clock-event (throttle) reasons, memory in use
STATE = {"index": ("index",), "uuid": ("uuid", "gpu_uuid"), "name": ("name", "gpu_name"),
         "clocks_sm_mhz": ("clocks.sm", "clocks.current.sm"), "clocks_max_sm_mhz": ("clocks.max.sm",),
         "temperature_c": ("temperature.gpu",), "memory_used_mib": ("memory.used",),
         "event_reasons": ("clocks_event_reasons.active", "clocks_throttle_reasons.active")}
APPS = {"pid": ("pid",), "gpu_uuid": ("gpu_uuid",), "used_memory_mib": ("used_gpu_memory", "used_memory")}

_NO_VALUE = re.compile(r"\[.*\]|n/a", re.IGNORECASE)
_UNIT = re.compile(r"\s*\[[^\]]*\]$")       # "memory.used [MiB]" in a header
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_LIST_GPU = re.compile(r"^GPU (\d+): (.*?) \(UUID: (GPU-[^)]+)\)")
_LIST_MIG = re.compile(r"^\s+(MIG .*?)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)")


def value(text: str | None) -> str | None:
    """A cell as text, or None where the driver had no value for it."""
    if text is None:
        return None
    text = text.strip()
    return None if not text or _NO_VALUE.fullmatch(text) else text


def number(text: str | None) -> float | None:
    """The number in a cell, units and all ("30.37 W" -> 30.37); None if it has none."""
    text = value(text)
    found = _NUMBER.match(text) if text else None
    return float(found.group()) if found else None


def bitmask(text: str | None) -> int | None:
    """A hex bitmask cell ("0x0000000000000040"), as an int."""
    text = value(text)
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def help_fields(text: str) -> set[str]:
    """Every field name (aliases included) that `nvidia-smi --help-query-*` lists."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith('"'):
            names.update(re.findall(r'"([^"]+)"', line))
    return names


def choose(wanted: dict[str, tuple[str, ...]], known: set[str] | None) -> dict[str, str]:
    """Our key -> the first alternative the driver knows; keys it knows none of are left out.

    Without a field list (a driver whose help could not be read) the first alternatives are used.
    """
    if not known:
        return {key: alts[0] for key, alts in wanted.items()}
    return {key: next(a for a in alts if a in known) for key, alts in wanted.items() if any(a in known for a in alts)}


def rows(text: str, keys: list[str] | None = None) -> list[dict[str, str | None]]:
    """CSV output of a --query-* (with or without its header) as dicts of cleaned cells.

    With ``keys`` the columns take those names in order (what we asked for); otherwise the
    header's names, units dropped. Rows of another length than the header are skipped.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    table = list(csv.reader(lines, skipinitialspace=True))
    if not table:
        return []
    if keys is None:
        keys, table = [_UNIT.sub("", h.strip()) for h in table[0]], table[1:]
    elif table and [_UNIT.sub("", h.strip()) for h in table[0]][:1] == [keys[0]]:
        table = table[1:]
    return [dict(zip(keys, (value(c) for c in row))) for row in table if len(row) == len(keys)]


def listing(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi -L`: GPUs with their UUIDs and, under each, its MIG devices."""
    gpus: list[dict[str, Any]] = []
    for line in text.splitlines():
        if m := _LIST_GPU.match(line):
            gpus.append({"index": m.group(1), "name": m.group(2), "uuid": m.group(3), "mig": []})
        elif (m := _LIST_MIG.match(line)) and gpus:
            gpus[-1]["mig"].append({"profile": m.group(1), "device": m.group(2), "uuid": m.group(3)})
    return gpus


# --- running it -------------------------------------------------------------------------------

def _run(args: list[str], timeout: float = 20) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def topology() -> str | None:
    """`nvidia-smi topo -m`: the matrix of the GPUs' links and each one's CPU and memory-node affinity; None where
    nvidia-smi is missing or fails."""
    return _run(["topo", "-m"])


@cache
def _known(kind: str) -> frozenset[str]:
    return frozenset(help_fields(_run([f"--help-query-{kind}"]) or ""))


def query(kind: str, wanted: dict[str, tuple[str, ...]]) -> list[dict[str, Any]] | None:
    """``--query-gpu`` or ``--query-compute-apps`` for the wanted keys; None without a working driver."""
    chosen = choose(wanted, set(_known(kind)))
    out = _run([f"--query-{kind}={','.join(chosen.values())}", "--format=csv,noheader,nounits"])
    if out is None:
        return None
    found = rows(out, list(chosen))
    return [{key: row.get(key) for key in wanted} for row in found]


def gpus() -> list[dict[str, Any]] | None:
    """Every GPU the driver shows (FACTS keys, missing ones None); None without a driver."""
    return query("gpu", FACTS)


def devices() -> list[dict[str, Any]] | None:
    """`nvidia-smi -L`, parsed; None without a driver."""
    out = _run(["-L"])
    return None if out is None else listing(out)

"""The GPU's state around a run, read on the host (a container cannot see other processes)."""
from __future__ import annotations

import shutil
import subprocess

GPU_FIELDS = ["index", "name", "clocks.sm", "clocks.max.sm", "temperature.gpu",
              "clocks_throttle_reasons.active", "memory.used"]
# Throttle reasons that mean the clocks were held down (NVML's bit values); idle and
# application-clock settings are not slowdowns.
SLOWDOWNS = {0x4: "software power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
             0x40: "hardware thermal slowdown", 0x80: "hardware power brake"}


def _query(args: list[str]) -> list[list[str]] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *args, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[c.strip() for c in line.split(",")] for line in out.strip().splitlines() if line.strip()]


def snapshot() -> dict | None:
    """Clocks, temperature, throttle reasons and compute processes of every GPU; None without a driver."""
    gpus = _query([f"--query-gpu={','.join(GPU_FIELDS)}"])
    if gpus is None:
        return None
    apps = _query(["--query-compute-apps=pid,used_memory"]) or []
    return {"gpus": [dict(zip(GPU_FIELDS, row)) for row in gpus],
            "processes": [{"pid": int(pid), "used_memory_mib": mem} for pid, mem in apps if pid.isdigit()]}


def findings(before: dict | None, after: dict | None) -> list[dict]:
    out = []
    for when, state in (("before", before), ("after", after)):
        if not state:
            continue
        for gpu in state["gpus"]:
            try:
                active = int(gpu["clocks_throttle_reasons.active"], 16)
            except ValueError:
                continue
            reasons = [text for bit, text in SLOWDOWNS.items() if active & bit]
            if reasons:
                out.append({"code": "gpu-throttled", "severity": "warning",
                            "message": f"GPU {gpu['index']} ({gpu['name']}) {when} the run: {', '.join(reasons)} "
                                       f"(SM clock {gpu['clocks.sm']} of {gpu['clocks.max.sm']} MHz, "
                                       f"{gpu['temperature.gpu']} C)"})
    if before and before["processes"]:
        pids = ", ".join(str(p["pid"]) for p in before["processes"])
        out.append({"code": "gpu-shared", "severity": "warning",
                    "message": f"other processes were using the GPU when the run started (pids {pids}); "
                               f"their work competes with the measured run"})
    return out

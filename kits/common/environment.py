"""Facts about the machine a kit runs on, framework-free."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host() -> dict:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
    }


def nvidia_smi() -> list[dict]:
    """GPUs as the NVIDIA driver reports them ([] where there is no driver)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version,compute_cap,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, driver, cap, mem = (part.strip() for part in line.split(","))
        gpus.append({"name": name, "driver": driver, "compute_capability": cap, "memory_mib": int(mem)})
    return gpus

"""Facts about the machine a kit runs on, framework-free."""
from __future__ import annotations

import os
import platform
from typing import Any

from reprokit.kits.framework_free import nvidia_smi as nvidia_smi_lib


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
    }


def nvidia_smi() -> list[dict[str, Any]]:
    """GPUs as the NVIDIA driver reports them ([] where there is no driver); None marks what it could not say."""
    found = nvidia_smi_lib.gpus() or []
    for gpu in found:
        memory = nvidia_smi_lib.number(gpu["memory_mib"])
        gpu["memory_mib"] = int(memory) if memory is not None else None
    return found

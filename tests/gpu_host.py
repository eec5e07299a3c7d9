"""A stand-in nvidia-smi for a GPU host: four H200s, two per NUMA node, with a driver of the test's choice.

It prints what the real one prints for the commands the kit asks (`topo -m`, `--query-gpu`, `-L`), so
the host checks, the topology and the runners see a GPU host on a machine that has none.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

# Two GPUs on NUMA node 0 and two on node 1 (`nvidia-smi topo -m` columns are tab-separated).
TOPO = ("\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV12\tSYS\tSYS\t0-1\t0\t\tN/A\n"
        "GPU1\tNV12\t X \tSYS\tSYS\t0-1\t0\t\tN/A\n"
        "GPU2\tSYS\tSYS\t X \tNV12\t2-3\t1\t\tN/A\n"
        "GPU3\tSYS\tSYS\tNV12\t X \t2-3\t1\t\tN/A\n\n"
        "Legend:\n\n  X    = Self\n")
LIST = "\n".join(f"GPU {i}: NVIDIA H200 (UUID: GPU-{i}aaaaaaa-0000-0000-0000-00000000000{i})" for i in range(4))


def uuid(i: int) -> str:
    return f"GPU-{i}aaaaaaa-0000-0000-0000-00000000000{i}"


def query(driver: str) -> str:
    """`--query-gpu` of the fields host_checks asks for (index, uuid, name, driver_version, compute_cap,
    memory.total, pci.bus_id), as a driver prints them under --format=csv,noheader,nounits."""
    return "\n".join(f"{i}, {uuid(i)}, NVIDIA H200, {driver}, 9.0, 143771, 00000000:{0x18 + i:02X}:00.0"
                     for i in range(4))


def install(folder: Path, monkeypatch, driver: str = "580.95.05") -> None:
    """Put the stand-in first on PATH (for this process and the kit processes it starts)."""
    for name, text in (("topo.txt", TOPO), ("query.txt", query(driver)), ("list.txt", LIST)):
        (folder / name).write_text(text + "\n")
    exe = folder / "nvidia-smi"
    exe.write_text(f'#!/bin/sh\ncase "$1" in\n  topo) cat {folder}/topo.txt ;;\n'
                   f'  --query-gpu=*) cat {folder}/query.txt ;;\n  -L) cat {folder}/list.txt ;;\nesac\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")

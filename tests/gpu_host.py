"""A stand-in nvidia-smi for a GPU host: four H200s (or any even number), half per NUMA node, with a driver of the
test's choice.

It prints what the real one prints for the commands the kit asks (`topo -m`, `--query-gpu`, `-L`), so
the host checks, the topology and the runners see a GPU host on a machine that has none.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path


def uuid(i: int) -> str:
    return f"GPU-{i}aaaaaaa-0000-0000-0000-00000000000{i}"


def topo(gpus: int) -> str:
    """`nvidia-smi topo -m` of ``gpus`` GPUs: the first half on NUMA node 0 and its CPUs (one per GPU: 0-1 of four
    GPUs), the rest on node 1 (2-3)."""
    half = gpus // 2
    near = [f"0-{half - 1}", f"{half}-{gpus - 1}"]
    rows = [f"GPU{i}\t" + "\t".join(" X " if j == i else "NV12" if (j < half) == (i < half) else "SYS"
                                     for j in range(gpus)) + f"\t{near[i >= half]}\t{int(i >= half)}\t\tN/A"
            for i in range(gpus)]
    return ("\t" + "\t".join(f"GPU{i}" for i in range(gpus)) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            + "\n".join(rows) + "\n\nLegend:\n\n  X    = Self\n")


# The four GPUs' `topo -m`: two GPUs on NUMA node 0 and two on node 1 (the columns are tab-separated).
TOPO = topo(4)


def query(driver: str, gpus: int = 4, models: Sequence[str] = ()) -> str:
    """`--query-gpu` of the fields host_checks asks for (index, uuid, name, driver_version, compute_cap,
    memory.total, pci.bus_id), as a driver prints them under --format=csv,noheader,nounits; ``models``: each GPU's
    name, where they are not all H200s."""
    names = list(models) or ["NVIDIA H200"] * gpus
    return "\n".join(f"{i}, {uuid(i)}, {names[i]}, {driver}, 9.0, 143771, 00000000:{0x18 + i:02X}:00.0"
                     for i in range(gpus))


def install(folder: Path, monkeypatch, driver: str = "580.95.05", gpus: int = 4, models: Sequence[str] = ()) -> None:
    """Put the stand-in first on PATH (for this process and the kit processes it starts)."""
    names = list(models) or ["NVIDIA H200"] * gpus
    listed = "\n".join(f"GPU {i}: {names[i]} (UUID: {uuid(i)})" for i in range(gpus))
    for name, text in (("topo.txt", topo(gpus)), ("query.txt", query(driver, gpus, models)), ("list.txt", listed)):
        (folder / name).write_text(text + "\n")
    exe = folder / "nvidia-smi"
    exe.write_text(f'#!/bin/sh\ncase "$1" in\n  topo) cat {folder}/topo.txt ;;\n'
                   f'  --query-gpu=*) cat {folder}/query.txt ;;\n  -L) cat {folder}/list.txt ;;\nesac\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")

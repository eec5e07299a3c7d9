"""Which CPU cores and memory node sit near each GPU, and one slot per GPU from that.

A slot is what one run gets when runs share a node: one GPU, a CPU set near
it that no other slot has, and that GPU's memory node. The CPUs near a GPU
come from `nvidia-smi topo -m` ("CPU Affinity", "NUMA Affinity"), else from
sysfs (the PCI device's ``local_cpulist`` and ``numa_node``), always cut
down to the CPUs this process may use. GPUs that share a set of CPUs split
it in whole cores, so co-running runs never share a data-loading core.

``REPROKIT_FAKE_GPU_SLOTS=N`` (or CPU lists, ``cpus:0;1``) is a switch for tests
only: it makes slots without a GPU on this host (each a share of the usable
CPUs, no memory node), so the scheduler, the pinning and the records can be
shown on a CPU machine.
Runs in fake slots are CPU runs; the records say ``"fake": true``.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FAKE_SLOTS_ENV = "REPROKIT_FAKE_GPU_SLOTS"
SYS = Path("/sys")


@dataclass(frozen=True)
class Placement:
    """Where one run goes: its GPU (host index and UUID), CPU set and memory node; a run that holds several GPUs
    (--devices N) has the others in ``more``, and the CPU sets and memory nodes of all of them."""

    gpu: str | None           # the host's index (None: a fake slot, no GPU)
    gpu_uuid: str | None
    cpus: str                 # cpuset list, e.g. "0-11,96-107"
    mems: str | None          # NUMA memory node(s), None where unknown
    fake: bool = False
    more: tuple[tuple[str | None, str | None], ...] = ()     # the run's other GPUs (index, UUID), in order

    @property
    def gpus(self) -> list[tuple[str | None, str | None]]:
        """Every GPU (or fake slot) of the run, as (index, UUID)."""
        return [(self.gpu, self.gpu_uuid), *self.more]

    @property
    def device_ids(self) -> list[str]:
        """What the engine or CUDA is told, one per GPU: the UUID where known (stable), else the index."""
        return [] if self.fake else [str(uuid or index) for index, uuid in self.gpus if uuid or index]

    @property
    def device_id(self) -> str | None:
        """CUDA_VISIBLE_DEVICES of the run: its GPUs' ids, comma-separated."""
        return ",".join(self.device_ids) or None

    @property
    def name(self) -> str:
        """The run's GPUs (or fake slots) in the ledger and on the console: their UUIDs, else gpu<index>."""
        return ",".join(uuid or f"gpu{index}" for index, uuid in self.gpus)

    def record(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.more:                    # one GPU: recorded as before runs held several
            del out["more"]
        return out


def joined(slots: list[Placement]) -> Placement:
    """One placement of several slots, for a run that holds them all: the first's GPU, the others in ``more``, every
    slot's CPUs, and their memory nodes where each is known."""
    first, rest = slots[0], slots[1:]
    if not rest:
        return first
    mems = [s.mems for s in slots]
    known = sorted({int(m) for text in mems if text is not None for m in parse_cpulist(text)})
    return Placement(first.gpu, first.gpu_uuid, format_cpulist(set().union(*(parse_cpulist(s.cpus) for s in slots))),
                     format_cpulist(known) if None not in mems else None, first.fake,
                     tuple((s.gpu, s.gpu_uuid) for s in rest))


def parse_cpulist(text: str) -> set[int]:
    """'0-3,8,10-11' -> {0, 1, 2, 3, 8, 10, 11}."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part.strip():
            continue
        lo, _, hi = part.strip().partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def format_cpulist(cpus: Iterable[int]) -> str:
    """{0, 1, 2, 5} -> '0-2,5'."""
    ranges: list[list[int]] = []
    for c in sorted(cpus):
        if ranges and c == ranges[-1][1] + 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in ranges)


def parse_topo(text: str) -> dict[str, tuple[set[int] | None, str | None]]:
    """GPU index -> (CPU affinity, NUMA affinity) from `nvidia-smi topo -m` (tab-separated columns)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((line.split("\t") for line in lines if "CPU Affinity" in line), None)
    if header is None:
        return {}
    names = [h.strip() for h in header]
    out = {}
    for line in lines:
        m = re.match(r"GPU(\d+)\s*$", line.split("\t")[0])
        if not m:
            continue
        cells = dict(zip(names, (c.strip() for c in line.split("\t"))))
        cpus = cells.get("CPU Affinity", "")
        numa = cells.get("NUMA Affinity", "")
        out[m.group(1)] = (parse_cpulist(cpus) if re.fullmatch(r"[0-9,\-]+", cpus) else None,
                           numa if re.fullmatch(r"[0-9,\-]+", numa) else None)
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _sysfs_affinity(bus_id: str) -> tuple[set[int] | None, str | None]:
    """(local CPUs, NUMA node) of a PCI device from sysfs; bus ids like 00000000:17:00.0."""
    dev = SYS / "bus" / "pci" / "devices" / bus_id.lower()[-12:]
    cpus = _read(dev / "local_cpulist")
    numa = _read(dev / "numa_node")
    return (parse_cpulist(cpus) if cpus else None, numa if numa and numa != "-1" else None)


def gpu_affinity(gpus: list[dict[str, Any]]) -> dict[str, tuple[set[int] | None, str | None]]:
    """GPU index -> (CPUs near it, its memory node), from `nvidia-smi topo -m`, else sysfs by the PCI bus id."""
    from reprokit.kits.framework_free.nvidia_smi import topology
    topo = parse_topo(topology() or "")
    out = {}
    for g in gpus:
        index = str(g["index"])
        cpus, numa = topo.get(index, (None, None))
        if (cpus is None or numa is None) and g.get("pci_bus_id"):
            s_cpus, s_numa = _sysfs_affinity(g["pci_bus_id"])
            cpus, numa = (cpus if cpus is not None else s_cpus), (numa if numa is not None else s_numa)
        out[index] = (cpus, numa)
    return out


def _core_order(cpus: set[int]) -> list[int]:
    """CPUs ordered so that hyperthread siblings are adjacent: shares then hold whole cores."""
    def core(c: int) -> int:
        siblings = _read(SYS / "devices" / "system" / "cpu" / f"cpu{c}" / "topology" / "thread_siblings_list")
        return min(parse_cpulist(siblings)) if siblings else c
    return sorted(cpus, key=lambda c: (core(c), c))


def _shares(cpus: set[int], n: int) -> list[set[int]]:
    """n disjoint, near-equal shares of cpus, in whole cores where possible; empty shares if n > len(cpus)."""
    ordered = _core_order(cpus)
    size, extra = divmod(len(ordered), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(set(ordered[start:end]))
        start = end
    return out


def usable_cpus() -> set[int]:
    return set(os.sched_getaffinity(0))


def fake_slots() -> list[Placement] | None:
    """The slots REPROKIT_FAKE_GPU_SLOTS makes (a test-only switch), or None when it is off.

    ``N``: N disjoint shares of the usable CPUs. ``cpus:LIST;LIST...``: one slot per CPU list, e.g.
    ``cpus:0`` and ``cpus:1`` give two nodes of a test cluster on one machine a CPU each.
    """
    from reprokit.errors import UserError
    value = os.environ.get(FAKE_SLOTS_ENV, "").strip()
    if not value:
        return None
    usable = usable_cpus()
    if value.isdigit() and int(value) >= 1:
        shares = _shares(usable, int(value))
    elif re.fullmatch(r"cpus:[0-9,\-]+(;[0-9,\-]+)*", value):
        shares = [parse_cpulist(part) for part in value.removeprefix("cpus:").split(";")]
    else:
        raise UserError(f"{FAKE_SLOTS_ENV}={value!r} is neither a number of slots nor CPU lists such as cpus:0;1; "
                        f"unset it outside tests.")
    if any(not s or not s <= usable for s in shares):
        raise UserError(f"{FAKE_SLOTS_ENV}={value!r} asks for CPUs this process may not use "
                        f"({format_cpulist(usable)}), or for more slots than it has CPUs.")
    return [Placement(None, f"fake-gpu-{i}", format_cpulist(s), None, fake=True) for i, s in enumerate(shares)]


def gpu_slots(gpus: list[dict[str, Any]]) -> list[Placement]:
    """One slot per GPU or MIG device (rows with 'index' and 'uuid', as host_checks.resolve_gpus gives),
    CPU sets split among those that share CPUs; a GPU whose affinity is unknown shares all usable CPUs."""
    usable = usable_cpus()
    affinity = gpu_affinity(gpus)
    groups: dict[frozenset[int], list[int]] = {}
    for n, g in enumerate(gpus):
        near = (affinity[str(g["index"])][0] or usable) & usable or usable
        groups.setdefault(frozenset(near), []).append(n)
    slots: dict[int, Placement] = {}
    for cpus, members in groups.items():
        members.sort(key=lambda n: (int(gpus[n]["index"]), n))
        for n, share in zip(members, _shares(set(cpus), len(members))):
            g = gpus[n]
            slots[n] = Placement(str(g["index"]), g.get("uuid") or None, format_cpulist(share or cpus),
                                 affinity[str(g["index"])][1])
    return [slots[n] for n in range(len(gpus))]

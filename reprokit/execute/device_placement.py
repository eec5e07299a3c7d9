"""Where runs that hold several devices go (--devices N): N of the host's GPUs each, or N stand-ins on a CPU.

On a GPU host each GPU is a slot (reprokit/environments/topology.py: the GPU, the CPUs near it, its memory node),
and a run at N devices holds N free slots at once, joined into one placement: its GPUs reach the process through
CUDA_VISIBLE_DEVICES, or one container's device requests. No two runs hold a slot at once, so no two timed runs
share a GPU; ``--parallel auto`` runs as many as fit, floor(G/N) where every run holds N. A run takes the slots of
one memory node where one has enough free (the fullest node that fits, keeping whole nodes for wider runs), else
the free slots in the host's order.

Runs that go at once are packed in rounds (the runs of a round hold their GPUs at the same time): the fewest
rounds for a sweep of 1, 2, 4 and 8 (reprokit/plan/device_counts.py ``rounds``), repeat by repeat, and the runs
start in that order, none overtaking one before it (reprokit/execute/schedule.py). Repeat by repeat, as the plan
orders them, so that a slow spell of the host falls on every count alike: packed across repeats, all the 8-GPU
runs would go first and the 1-GPU runs last, and the host's drift would read as scaling; it costs at most one round
in eight (one script's 1, 2, 4 and 8 on 8 GPUs: 2 rounds a repeat against R + ceil(7R/8) for R repeats packed
together, the same up to 7 repeats).

On a CPU host a run's N devices are stand-ins the kit makes inside its process (reprokit/kits/devices/stand_ins.py), at
most the CPUs this process may use. Everything here is a pure function of the host's description (the slots),
so placement is tested on described hosts; it is untested on real GPUs.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from reprokit.environments.topology import Placement, joined
from reprokit.errors import UserError
from reprokit.kits.contract.spec import Spec
from reprokit.plan import device_counts

# What each result of a sweep on mixed GPUs declares (environment.mixed_gpus), and the report reads.
MIXED_GPUS = ("--mixed-gpus: the host's GPUs differ in model, and the sweep runs on them anyway, so a count's runs "
              "may time other GPUs than another count's")
Placed = tuple[int, int, Placement]      # a run's index among the runs given, its host's index, its placement


def held(spec: Spec) -> int:
    """The devices a run holds: its spec's count (a kit run's spec has none: one)."""
    return getattr(spec, "devices", 1)


class Pool:
    """The host's slots, each held by at most one run at once, and at most ``at_once`` runs."""

    def __init__(self, slots: Sequence[Placement], at_once: int) -> None:
        self.slots = list(slots)
        self.at_once = at_once
        self.free = list(slots)
        self._taken: dict[Placement, list[Placement]] = {}

    def take(self, n: int) -> Placement | None:
        """The placement of a run at n devices, its slots taken; None where they are not free now."""
        if n > len(self.slots):
            raise ValueError(f"a run at {n} devices on {len(self.slots)} slots: refused before any run")
        if len(self._taken) >= self.at_once or len(self.free) < n:
            return None
        nodes: dict[str | None, list[Placement]] = {}
        for slot in self.free:
            nodes.setdefault(slot.mems, []).append(slot)
        fitting = [free for mems, free in nodes.items() if mems is not None and len(free) >= n]
        chosen = min(fitting, key=len)[:n] if fitting else self.free[:n]
        for slot in chosen:
            self.free.remove(slot)
        placement = joined(chosen)
        self._taken[placement] = chosen
        return placement

    def give_back(self, placement: Placement) -> None:
        order = {id(s): i for i, s in enumerate(self.slots)}
        self.free = sorted([*self.free, *self._taken.pop(placement)], key=lambda s: order[id(s)])

    def first_round(self, n: int) -> list[Placement]:
        """The placements runs at n devices get when they start together on a free host (the pool left as it was)."""
        out = []
        while (placement := self.take(n)) is not None:
            out.append(placement)
        for placement in out:
            self.give_back(placement)
        return out


def placed_rounds(specs: Sequence[Spec], hosts: Sequence[Sequence[Placement]], at_once: int | None = None
                  ) -> list[list[Placed]]:
    """The runs in rounds on the hosts (each described by its slots: this host's GPUs, or a cluster's nodes), repeat by
    repeat, each run on one host with the slots a Pool gives it there (the widest first, so they stay aligned)."""
    out: list[list[Placed]] = []
    for repeat in sorted({s.repeat for s in specs}):
        mine = [k for k, s in enumerate(specs) if s.repeat == repeat]
        for packed in device_counts.rounds([held(specs[k]) for k in mine], [len(h) for h in hosts], at_once):
            pools = [Pool(h, len(h)) for h in hosts]
            placed = []
            for k, host in packed:
                placement = pools[host].take(held(specs[mine[k]]))
                assert placement is not None, "device_counts.rounds never packs more on a host than it has"
                placed.append((mine[k], host, placement))
            out.append(placed)
    return out


def start_order(specs: Sequence[Spec], slots: Sequence[Placement], at_once: int) -> list[int]:
    """The order the runs start in on this host: round by round (the indices of ``specs``)."""
    return [k for placed in placed_rounds(specs, [slots], at_once) for k, _, _ in placed]


def check_models(given: tuple[int, ...], assigned: Sequence[dict[str, Any]], gpus: str, allowed: bool
                 ) -> dict[str, str] | None:
    """A sweep on GPUs that differ in model refused before any run, in one sentence, unless --mixed-gpus allows it:
    then each GPU's model by its UUID, which every result declares (``declare_models``); None where they agree."""
    models = {g.get("uuid") or f"gpu{g['index']}": g["name"] for g in assigned}
    if len(device_counts.counts(given)) < 2 or len(set(models.values())) < 2:
        return None
    if allowed:
        return models
    by_model: dict[str, list[str]] = {}
    for g in assigned:
        by_model.setdefault(g["name"], []).append(str(g["index"]))
    named = "; ".join(f"GPU {','.join(indices)}: {name}" for name, indices in by_model.items())
    first = next(iter(by_model.values()))
    raise UserError(f"--devices {device_counts.text(given)} compares runs at each count, and the GPUs --gpus {gpus} "
                    f"assigns differ in model ({named}), so the runs at one count could time other GPUs than those "
                    f"at another; assign GPUs of one model with --gpus (such as --gpus {','.join(first)}), or give "
                    f"--mixed-gpus to run the sweep anyway, declared in each result and in the report.")


def declare_models(result: dict[str, Any], models: dict[str, str]) -> None:
    """--mixed-gpus: the model of each GPU the run held (its placement's, else every assigned GPU), and that the
    sweep ran on mixed GPUs, in the result's environment, where the report reads a run's GPU model."""
    environment = result.get("environment")
    if environment is None:                 # a run that ended before its kit wrote its facts
        return
    placement = (result.get("launcher") or {}).get("placement")
    held_gpus = ([placement["gpu_uuid"] or f"gpu{placement['gpu']}",
                  *(uuid or f"gpu{index}" for index, uuid in placement.get("more", ()))] if placement else list(models))
    environment["gpu_models"] = [models.get(g, "unknown") for g in held_gpus]
    environment["mixed_gpus"] = MIXED_GPUS


def runs_at_once(widest: int, device: str, slots: list[Placement | None], assigned: int, gpus: str,
                 parallel: str) -> int:
    """How many runs may go at once where the widest holds ``widest`` devices; the counts the host cannot give
    refused before any run, in one sentence naming both numbers. ``slots`` as compose made them ([None]: one run at
    a time with every assigned GPU), ``assigned`` the GPUs --gpus assigns."""
    if device != "gpu" and slots == [None]:
        usable = len(os.sched_getaffinity(0))
        if widest > usable:
            raise UserError(f"--devices {widest} asks for {widest} stand-in devices per run, and this host lets the "
                            f"kit use {usable} CPU{'s' if usable != 1 else ''} (os.sched_getaffinity); give --devices "
                            f"{usable} or less, or run on a host with {widest} GPUs.")
        return 1
    have = assigned if slots == [None] else len(slots)
    if widest > have:
        raise UserError(f"--devices {widest} asks for {widest} GPUs per run, and --gpus {gpus} assigns {have}; give "
                        f"--devices {have} or less, or assign more GPUs with --gpus.")
    if slots == [None]:
        return 1
    fit = len(slots) // widest
    if parallel.isdigit() and int(parallel) > fit:
        raise UserError(f"--parallel {parallel} with --devices {widest} needs {int(parallel) * widest} GPUs at once, "
                        f"and --gpus {gpus} assigns {len(slots)}; give --parallel {fit} or less, or --parallel auto.")
    return len(slots) if parallel == "auto" else int(parallel)


def lines(counts: Sequence[int], device: str, slots: list[Placement | None], at_once: int) -> list[str]:
    """The dry run's lines on the devices of each count: which GPUs the runs of the first round hold, how many go
    at once; or the stand-ins a CPU run gets."""
    if device != "gpu" and slots == [None]:
        usable = len(os.sched_getaffinity(0))
        return [f"devices: each run at N > 1 holds N stand-in devices, each framework's own, declared in its result; "
                f"they share this host's {usable} CPU{'s' if usable != 1 else ''}, one run at a time, so their "
                f"scaling says nothing about GPUs"] if max(counts) > 1 else []
    if slots == [None]:
        return []
    pool = Pool([s for s in slots if s is not None], at_once)
    out = []
    for n in counts:
        first = pool.first_round(n)
        held_by = " | ".join(_shown(p) for p in first)
        out.append(f"devices {n}: {len(first)} run(s) at once, each on {n} "
                   f"{'fake (test-only) GPU slot' if first[0].fake else 'GPU'}{'s' if n > 1 else ''}: {held_by}")
    return out


def round_lines(specs: Sequence[Spec], hosts: Sequence[Sequence[Placement]], at_once: int,
                host_names: Sequence[str] | None = None) -> list[str]:
    """The dry run's rounds, where runs of several counts go at once: each run by its number in the plan, its count
    and the GPUs it holds (on which node, for a cluster), and whether they are the fewest rounds there can be."""
    if at_once <= 1 or len({held(s) for s in specs}) == 1:
        return []
    placed = placed_rounds(specs, hosts, at_once)
    fewest = sum(device_counts.fewest_rounds([held(s) for s in specs if s.repeat == r], [len(h) for h in hosts],
                                             at_once) for r in {s.repeat for s in specs})
    how = ("the fewest they fit in, repeat by repeat" if len(placed) == fewest
           else f"first fit decreasing, repeat by repeat; no packing takes fewer than {fewest}")
    out = [f"rounds (the runs of a round hold their GPUs at the same time, none shares one; placed from this "
           f"{'cluster' if host_names else 'host'}'s description, untested on real GPUs): {len(specs)} runs in "
           f"{len(placed)} rounds, {how}"]
    for i, runs in enumerate(placed, 1):
        where = [f"run {k + 1} ({held(specs[k])}) on {f'node {host_names[h]} ' if host_names else ''}"
                 f"GPU {','.join(index or uuid or '?' for index, uuid in p.gpus)}" for k, h, p in runs]
        out.append(f"  round {i}: {' · '.join(where)}")
    return out


def _shown(placement: Placement) -> str:
    """A run's GPUs by host index (a fake slot by its name), and its CPUs."""
    gpus = ",".join(index if index is not None else uuid or "?" for index, uuid in placement.gpus)
    return f"{'' if placement.fake else 'GPU '}{gpus} (CPUs {placement.cpus})"


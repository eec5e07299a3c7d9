"""--devices N[,N...]: the devices one run holds, and a sweep over several counts.

Each count is a run of its own, in one matrix: the count is in the spec (``devices``), so in its run id, and an
interrupted sweep resumes as any matrix does. An experiment file's ``device_counts`` are its counts where --devices
is not given. The counts are checked here, before the host is looked at; how many devices the host has is checked
where the runs are placed (reprokit/execute/device_placement.py).

A run's devices reach a probed script, or the kit's own run, which trains data-parallel over them: its GPUs, or
stand-in devices on a CPU (reprokit/kits/devices/). A kit run's train.batch_size is its global batch at its count
(``global_batches``).
"""
from __future__ import annotations

from collections.abc import Sequence

from reprokit.errors import UserError


def parse(given: str | None) -> tuple[int, ...]:
    """--devices as given: its counts in order; () where it is not given (one device per run)."""
    if given is None:
        return ()
    words = [w.strip() for w in given.split(",")]
    if not all(w.isdigit() for w in words):
        raise UserError(f"--devices {given!r} is not understood; give the devices one run holds, or several counts "
                        f"separated by commas for a sweep, such as --devices 2 or --devices 1,2,4.")
    counts = tuple(int(w) for w in words)
    if 0 in counts:
        raise UserError(f"--devices {given}: a run holds at least one device; give counts of 1 or more, such as "
                        f"--devices 1,2.")
    if len(set(counts)) != len(counts):
        twice = sorted({c for c in counts if counts.count(c) > 1})
        raise UserError(f"--devices {given} names {', '.join(map(str, twice))} more than once; give each count once, "
                        f"such as --devices {','.join(map(str, sorted(set(counts))))}.")
    return counts


def counts(given: tuple[int, ...]) -> tuple[int, ...]:
    """The counts the plan runs each script at: those given, else one device."""
    return given or (1,)


def text(given: Sequence[int]) -> str:
    """The counts as the flag is written: 2, or 1,2,4."""
    return ",".join(map(str, given))


def global_batches(name: str, batch: int, scaling: str, given: Sequence[int], samples: int, profile: str,
                   source: str) -> dict[int, int]:
    """Each count's global batch for a kit experiment whose train.batch_size is ``batch``: that batch at every count
    (strong scaling), or that batch on each device, N times it at N (weak). Refused in one sentence, ``source``
    naming where the counts come from: under strong scaling a count that does not divide the batch (each device
    takes an equal share); under weak, a global batch above the ``samples`` the profile trains on (no full batch)."""
    out = {}
    for n in given:
        if scaling == "strong" and batch % n:
            fit = [d for d in range(1, max(n, 8) + 1) if batch % d == 0][:4]
            raise UserError(f"{source} asks for {n} devices, which do not divide {name}'s global batch of {batch} "
                            f"(strong scaling keeps it at every count); give counts that divide {batch}, such as "
                            f"{text(fit)}.")
        if scaling == "weak" and batch * n > samples:
            most = samples // batch
            fix = f"give counts up to {most}, or" if most else "give"
            raise UserError(f"{source} asks for {n} devices, and {name} scales weakly: its global batch at {n} is "
                            f"{n} x {batch} = {n * batch}, more than its {samples} training samples (profile "
                            f"{profile}); {fix} more training samples (data.train_samples).")
        out[n] = batch if scaling == "strong" else batch * n
    return out


def rounds(counts: Sequence[int], hosts: Sequence[int], at_once: int | None = None) -> list[list[tuple[int, int]]]:
    """Runs, each by its count of devices, packed in rounds on hosts of so many devices each: per round, the (run,
    host) pairs by their indices in ``counts`` and ``hosts``. A round's runs hold their devices at the same time; a
    run is on one host (a Ray cluster's node, or this host), and no host holds more than it has, so no two runs share
    a device; a round holds at most ``at_once`` runs (--parallel K).

    First fit decreasing: the widest run first, each into the first round where a host has room for it, there the
    host it fills most. Where each count divides the larger ones and each host's devices are a multiple of the
    counts it takes (1, 2, 4 and 8 on hosts of 8 or 4 GPUs) and ``at_once`` does not bind, these are the fewest
    rounds there can be: a run of count s goes in a later round only where every earlier round has each host that
    takes s full (its room is a multiple of s, and less than s), so the rounds are at most ceil(the devices the runs
    of s or more hold / the devices of the hosts that take s), for every s, which any packing needs too. Other
    counts (3 on 8 GPUs) can take a round more than the fewest (first fit decreasing is within 11/9 of them)."""
    if counts and (not hosts or max(counts) > max(hosts)):
        raise ValueError(f"a run of {max(counts)} devices fits on no host of {max(hosts, default=0)}: refused before "
                         f"any run")
    out: list[tuple[list[int], list[tuple[int, int]]]] = []          # per round: each host's free devices, its runs
    for k in sorted(range(len(counts)), key=lambda k: -counts[k]):
        n = counts[k]
        for free, placed in out:
            room = [(left, h) for h, left in enumerate(free) if left >= n]
            if room and (at_once is None or len(placed) < at_once):
                break
        else:
            free, placed = list(hosts), []
            out.append((free, placed))
            room = [(left, h) for h, left in enumerate(free) if left >= n]
        host = min(room)[1]
        free[host] -= n
        placed.append((k, host))
    return [placed for _, placed in out]


def fewest_rounds(counts: Sequence[int], hosts: Sequence[int], at_once: int | None = None) -> int:
    """A bound no packing of the runs goes below: for each count s, the devices the runs of s or more hold over those
    of the hosts that take s; and the runs over ``at_once``. ``rounds`` meets it where the counts divide (above)."""
    bound = -(-len(counts) // at_once) if at_once else 0
    for s in set(counts):
        room = sum(h for h in hosts if h >= s)
        bound = max(bound, -(-sum(c for c in counts if c >= s) // room))
    return bound

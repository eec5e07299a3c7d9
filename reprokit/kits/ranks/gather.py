"""One result from every process of the script that trained: each rank's, worker's or the one process's, and in all.

Each process the probe followed (reprokit/kits/ranks/follow.py) that stepped an optimizer leaves a result of its own
(the kit's schema), with ``process``: who it was. The run's result is the first rank's (rank 0, or the first worker, or
the one process) with ``processes``: how many ranks, workers and replicas the run had, each one's steps, batches,
samples and peak memory, and their totals, with how memory adds up. The words are the report's:

- rank r: a process of a process group (torch.distributed, a TensorFlow task, ``jax.process_index()``);
- worker k: any other process that steps an optimizer (Hogwild's);
- replica d: a device inside one process (MirroredStrategy, a JAX mesh).

A process that failed fails the run with its own error, naming it. Standard library only.
"""
from __future__ import annotations

import copy
from typing import Any

from reprokit.kits.observation import rank_detectors

RANK, WORKER = "rank", "worker"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def who(process: dict[str, Any]) -> str:
    """"rank 1", "worker 2", "the script's process"."""
    if process.get("role") in (RANK, WORKER):
        return f"{process['role']} {process['index']}"
    return "the script's process"


def _order(result: dict[str, Any]) -> tuple[int, int]:
    p = result.get("process") or {}
    return ({RANK: 0, WORKER: 1}.get(p.get("role"), 2), p.get("index") or 0)


def _each(result: dict[str, Any]) -> dict[str, Any]:
    """One process's figures: its steps, batches, samples, evaluation, time, peak memory and the probe's own cost."""
    effective, timing, memory = result["effective"], result["timing"], result["memory"]
    p = result.get("process") or {}
    return {"who": who(p), "role": p.get("role"), "index": p.get("index"), "pid": p.get("pid"),
            "backend": p.get("backend"), "replicas": p.get("replicas"),
            "device": result.get("environment", {}).get("device_uuid") or result.get("environment", {}).get("device"),
            "steps": sum(effective.get("train_steps_per_epoch") or []),
            "batch_size": effective["batch_size"],
            "samples": sum(effective.get("train_samples_per_epoch") or []),
            "test_samples": effective.get("test_samples"),
            "samples_per_s": timing.get("samples_per_s"),
            "step_s": timing.get("step_s"),
            "peak_bytes": memory.get("peak_bytes"),
            "process_peak_bytes": memory.get("process_peak_bytes", memory.get("peak_bytes")),
            "bounded": result.get("probe", {}).get("ended"),
            "probe_own_seconds_per_step": result.get("probe", {}).get("own_seconds_per_step")}


def seen(each: list[dict[str, Any]], replicas: int | None) -> str:
    """"2 ranks", "3 workers", "1 process, 2 replicas": what the run had, in the report's words."""
    ranks = sum(1 for e in each if e["role"] == RANK)
    workers = sum(1 for e in each if e["role"] == WORKER)
    parts = [_plural(ranks, "rank")] if ranks else []
    parts += [_plural(workers, "worker")] if workers else []
    if not parts:
        parts = [_plural(len(each), "process")]
    if replicas and replicas > 1:
        parts.append(_plural(replicas, "replica") + (" per rank" if ranks > 1 else ""))
    return ", ".join(parts)


def _total(each: list[dict[str, Any]], stand_in: bool) -> dict[str, Any]:
    """In all: the samples, the global batch (a group's ranks each take their own batch of every step), the
    throughput of processes that train at once, and how memory adds up."""
    ranks = [e for e in each if e["role"] == RANK]
    devices: dict[str, int] = {}
    for e in each:
        if e["device"] not in (None, "cpu") and e["peak_bytes"] is not None:
            devices[e["device"]] = devices.get(e["device"], 0) + e["peak_bytes"]
    host = [e["process_peak_bytes"] for e in each if e["process_peak_bytes"] is not None]
    rates = [e["samples_per_s"] for e in each if e["samples_per_s"]]
    return {
        "samples": sum(e["samples"] for e in each),
        "steps_per_process": sorted({e["steps"] for e in each}),
        # a group's ranks each feed their own batch to every step; one process feeds its replicas one batch, split
        "global_batch": (sum(e["batch_size"]["configured"] for e in ranks) if ranks else
                         each[0]["batch_size"]["configured"] if len(each) == 1 else None),
        "per_replica_batch": (each[0]["batch_size"]["configured"] / each[0]["replicas"]
                              if len(each) == 1 and (each[0]["replicas"] or 1) > 1 else None),
        "samples_per_s": sum(rates) if len(rates) == len(each) else None,
        "memory": {
            "per_process_peak_bytes": max(host) if host else None,
            "per_device_peak_bytes": None if stand_in or not devices else devices,
            "per_device": ("n/a: the processes ran on the CPU (stand-in devices share it)" if stand_in else
                           "each device's processes' peaks, added" if devices else "n/a: no process ran on a GPU"),
            "host_peak_bytes": sum(host) if host else None,
            "host": "each process's peak, added: an upper bound, since their peaks need not coincide"},
    }


def gather(main: dict[str, Any] | None, followed: list[dict[str, Any]], stand_in: bool) -> dict[str, Any] | None:
    """The run's result from the script's own process (``main``: its result where it trained, else None) and the
    results the processes it started left; None where no process trained. ``stand_in``: the run's devices are
    stand-ins on one CPU."""
    trained = sorted([r for r in ([main] if main else []) + followed if r.get("status") == "ok"], key=_order)
    if not trained:
        return None
    out = copy.deepcopy(trained[0])
    out.pop("process", None)               # who each process was is in ``processes``
    each = [_each(r) for r in trained]
    if len(each) == 1 and each[0]["role"] != RANK and not (each[0]["replicas"] or 0) > 1:
        return out                          # one process on one device: its figures are the run's
    out["findings"] = [*out.get("findings", []), *rank_detectors.findings(trained)]
    replicas = max((e["replicas"] or 1) for e in each)
    out["processes"] = {"seen": seen(each, replicas), "ranks": sum(1 for e in each if e["role"] == RANK),
                        "workers": sum(1 for e in each if e["role"] == WORKER), "replicas": replicas,
                        "each": each, "total": _total(each, stand_in),
                        "shown": f"the run's figures are {each[0]['who']}'s; `processes` holds each one's and the "
                                 f"totals"}
    return out


def failed(followed: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first failure among the processes the script started (the earliest: a rank that raised makes its
    peers fail after it, in their collectives), its message naming the process, else None."""
    failures = [r for r in followed if r.get("status") == "failed" and r.get("failure")]
    if not failures:
        return None
    first = min(failures, key=lambda r: (r["failure"].get("at", float("inf")), _order(r)))
    failure = {k: v for k, v in first["failure"].items() if k != "at"}
    failure["message"] = f"{who(first.get('process') or {})} {failure['message']}"
    return failure


def declarations(own: list[str], theirs: list[str]) -> list[str]:
    """The run's declarations: the script's own process's (its launcher, its devices), then those its processes
    made beside them, each once."""
    return list(dict.fromkeys([*own, *theirs]))

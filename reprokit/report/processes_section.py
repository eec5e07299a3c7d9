"""The processes of each script that ran as several: each rank's, worker's or replica's figures, and in all.

Its own module because it reads one part of a result, ``processes`` (reprokit/kits/ranks/gather.py): the run's other
figures are its first process's, and this says so, with every process's steps, batches, samples and peak memory
beside them, and how memory adds up: per process, per device, and on the host.
"""
from __future__ import annotations

from typing import Any

from reprokit.kits.contract.names import LABELS
from reprokit.report.markdown import md, table
from reprokit.results import runs
from reprokit.results.units import memory, sig


def _memory(value: Any) -> str:
    return memory(value) if isinstance(value, (int, float)) else "n/a"


def _row(each: dict[str, Any]) -> list[str]:
    batch, steps = each["batch_size"], each.get("step_s") or {}
    batches = f"{batch['configured']}" + (f" ({batch['min']}-{batch['max']})" if batch["min"] != batch["max"] else "")
    return [md(each["who"]), str(each["steps"]), batches, f"{each['samples']:,}",
            sig(each["samples_per_s"]) if each.get("samples_per_s") else "not measured",
            f"{steps['p50']:.3g} s" if steps.get("p50") is not None else "not measured",
            _memory(each.get("process_peak_bytes")), md(each.get("backend") or "-")]


def _totals(p: dict[str, Any]) -> str:
    total, mem = p["total"], p["total"]["memory"]
    batch = [f"global batch {total['global_batch']}"] if total.get("global_batch") else []
    if total.get("per_replica_batch"):
        batch.append(f"{sig(total['per_replica_batch'])} per replica")
    rate = f", {sig(total['samples_per_s'])} samples/s" if total.get("samples_per_s") else ""
    devices = mem.get("per_device_peak_bytes")
    per_device = ("; ".join(f"{md(d)} {_memory(v)}" for d, v in devices.items()) if devices else md(mem["per_device"]))
    return (f"In all: {total['samples']:,} training samples{rate}" + (f", {', '.join(batch)}" if batch else "") +
            f"; steps per process {', '.join(map(str, total['steps_per_process']))}. Memory: per process at most "
            f"{_memory(mem.get('per_process_peak_bytes'))}; per device {per_device}; on the host "
            f"{_memory(mem.get('host_peak_bytes'))} ({md(mem['host'])}).")


def processes(results: list[dict[str, Any]]) -> str | None:
    """One table per script run (its first repeat, at each device count) whose result has several processes or
    replicas, with its totals; None where every script ran as one process on one device."""
    parts = []
    firsts = {(r["variant"], r["framework"], runs.devices(r)): r for r in sorted(
        (r for r in results if r["status"] == "ok"), key=lambda r: -r["repeat"])}
    for (variant, fw, devices), r in sorted(firsts.items()):
        p = r.get("processes")
        if not runs.is_script(r["spec"]) or not p:
            continue
        at = f" at {devices} devices" if devices > 1 else ""
        head = (f"- {LABELS[fw]}, `{md(variant)}`{at}: {md(p['seen'])}; the run's figures are "
                f"{md(p['each'][0]['who'])}'s.")
        rows = [_row(e) for e in p["each"]]
        parts.append(head + "\n\n" + table(rows, ["process", "steps", "batch", "samples", "samples/s", "step p50",
                                                  "peak memory", "collectives"]) + "\n\n" + _totals(p))
    return "\n\n".join(parts) if parts else None

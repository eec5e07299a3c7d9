"""The certificate's checks at N devices: do two scripts at N do the same work? From the evidence each process of
each script left at its first step (reprokit/kits/ranks/certified.py), never from the scripts' text.

- ``batches``: the global batch (a group's ranks' batches added; one process's batch, split among its replicas)
  and the per-device batch are the same in both;
- ``gradient_reduction``: each step's gradient is what one device computes on the same global batch (the loss
  each replica differentiates against its batch's mean loss, and how the replicas' gradients add up: DDP
  averages, a strategy's update sums);
- ``data_shards``: the ranks took distinct samples at their first step (each sample by its inputs' sum), or the
  framework split one process's batch among its replicas; whether the order changes each epoch is the run's
  finding (same-order-every-epoch), a first step cannot show it;
- ``batchnorm_sync``: BatchNorm's statistics synchronised on both sides, or on neither.

Each check passes, fails, or says "not measured" with why; a result from before the evidence existed is never a
pass. Standard library only: the host runs them.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from reprokit.kits.contract.names import label

TOLERANCE = 0.05             # a gradient within 5% of one device's on the same batch (shards of unequal sizes)
ALIKE = 0.5                  # of a rank's first samples, also on another rank: not its own shard


def _check(name: str, passed: bool | None, evidence: str, numbers: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "passed": passed,
                           "evidence": evidence if passed is not None else f"not measured: {evidence}"}
    if passed is None:
        out["not_measured"] = evidence
    if numbers is not None:
        out["numbers"] = numbers
    return out


def summary(evidence: list[dict[str, Any]], devices: int) -> dict[str, Any]:
    """One side's figures at N from its processes' evidence: global and per-device batch, gradient factor,
    BatchNorm, and whether its ranks took distinct samples."""
    ranks = [e for e in evidence if e["who"]["role"] == "rank"]
    lead = next((e for e in evidence if e["who"]["role"] in ("process", "worker")), ranks[0] if ranks else None)
    if lead is None:
        return {}
    batches = [e["batch"] for e in ranks] if ranks else [lead["batch"]]
    global_batch = sum(b for b in batches if b) if all(batches) else None
    split = len(ranks) if ranks else lead.get("replicas") or 1
    factors = [(e.get("loss_scale") or {}).get("factor") for e in (ranks or [lead])]
    shared = None
    if len(ranks) > 1 and all(e.get("samples") for e in ranks):
        first = [Counter(e["samples"]) for e in ranks]
        shared = max(sum((a & b).values()) / sum(a.values()) for i, a in enumerate(first) for b in first[i + 1:])
    return {"devices": devices, "processes": len(ranks) or 1, "global_batch": global_batch,
            "per_device_batch": global_batch / split if global_batch else None, "replicas": split,
            "factor": factors[0] if factors and None not in factors else None,
            "per_replica": ((ranks or [lead])[0].get("loss_scale") or {}).get("per_replica"),
            "batchnorm": lead.get("batchnorm"), "shared_samples": shared, "split_by": "ranks" if ranks else
            "the framework, among one process's replicas" if split > 1 else "nothing: one device"}


def batches(sides: dict[str, dict[str, Any]], at_one: dict[str, int | None]) -> dict[str, Any]:
    """The same global and per-device batch in both; where they differ, both, and how each scaled with N."""
    if any(s.get("global_batch") is None for s in sides.values()):
        return _check("batches", None, "a side's first step showed no batch size (a result from before the kit "
                                       "recorded it, or a step that took none)")
    shown = []
    for fw, s in sides.items():
        one = at_one.get(fw)
        scaled = ("its global batch grew with N (weak scaling)" if one and s["global_batch"] == one * s["devices"] else
                  "its global batch held (strong scaling)" if one and s["global_batch"] == one else
                  "not known how it scaled with N (no run of it at 1 device)" if not one else
                  f"its global batch went from {one} at 1 device")
        shown.append(f"{label(fw)} global batch {s['global_batch']}, {s['per_device_batch']:g} per device over "
                     f"{s['devices']} ({scaled})")
    numbers = {fw: {"global": s["global_batch"], "per_device": s["per_device_batch"]} for fw, s in sides.items()}
    same = len({(s["global_batch"], s["per_device_batch"]) for s in sides.values()}) == 1
    return _check("batches", same, "; ".join(shown), numbers)


def gradient_reduction(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    factors = {fw: s.get("factor") for fw, s in sides.items()}
    if None in factors.values():
        missing = ", ".join(label(fw) for fw, f in factors.items() if f is None)
        return _check("gradient_reduction", None, f"{missing}'s step did not show how it scaled its loss (a loss the "
                                                  f"probe does not read, or gradients reduced by the script's own "
                                                  f"code)")
    measured = {fw: float(f) for fw, f in factors.items() if f is not None}
    parts = [f"{label(fw)} {f:.3g} times the gradient one device takes on the same global batch (each replica "
             f"differentiates {sides[fw]['per_replica']:.3g} times its batch's mean loss)"
             for fw, f in measured.items()]
    passed = all(abs(f - 1) <= TOLERANCE for f in measured.values())
    return _check("gradient_reduction", passed, "; ".join(parts), measured)


def data_shards(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    parts, passed = [], True
    for fw, s in sides.items():
        if s["processes"] > 1 and s.get("shared_samples") is None:
            return _check("data_shards", None, f"{label(fw)}'s ranks left no samples to compare")
        if s["processes"] > 1:
            alike = s["shared_samples"] >= ALIKE
            passed &= not alike
            took = "took the same samples" if alike else "each took its own samples"
            parts.append(f"{label(fw)}'s ranks {took} ({s['shared_samples']:.0%} alike at the first step)")
        else:
            parts.append(f"{label(fw)} splits each batch among {s['replicas']} replica(s) ({s['split_by']})")
    return _check("data_shards", passed, "; ".join(parts) + "; whether the order changes each epoch is the run's "
                                                             "finding (same-order-every-epoch)")


def batchnorm_sync(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    kinds = {fw: s.get("batchnorm") for fw, s in sides.items()}
    if all(k is None for k in kinds.values()):
        return _check("batchnorm_sync", True, "neither model has a BatchNorm layer")
    if None in kinds.values():
        return _check("batchnorm_sync", False, "; ".join(f"{label(fw)}: {k or 'no BatchNorm'}" for fw, k in
                                                         kinds.items()))
    same = len(set(kinds.values())) == 1
    return _check("batchnorm_sync", same, "; ".join(f"{label(fw)}'s BatchNorm statistics {k}"
                                                    for fw, k in kinds.items()), kinds)


def checks(evidence: dict[str, list[dict[str, Any]]], devices: dict[str, int],
           at_one: dict[str, int | None]) -> list[dict[str, Any]]:
    """The four checks at N, each side's evidence its processes' files; ``at_one`` each side's global batch at 1
    device where the run has one."""
    sides = {fw: summary(e, devices[fw]) for fw, e in evidence.items()}
    if any(not s for s in sides.values()):
        why = "a side left no evidence at its first step (a result from before the certificate at N)"
        return [_check(n, None, why) for n in ("batches", "gradient_reduction", "data_shards", "batchnorm_sync")]
    return [batches(sides, at_one), gradient_reduction(sides), data_shards(sides), batchnorm_sync(sides)]

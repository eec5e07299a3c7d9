"""Run-time detectors of the pitfalls of many devices, each judged from what the run's processes showed.

Every process of a run leaves its own result (reprokit/kits/ranks/gather.py); these read them side by side: who each was
(rank r, worker k), its evidence (``probe.evidence``: the first training batches of two epochs, as labels and
each sample's sum of inputs; each measured step's span from its forward pass's end to its optimizer step,
reprokit/kits/pytorch_kit/rank_evidence.py), its collectives' backend and device, and its evaluation. A finding is the
detectors' {"code", "severity", "message"}, its message the evidence and, where it has one, its share of the run's
time or work. Each is silent where the run did not show the pitfall: ranks on their own shards, an order that
changes each epoch, NCCL on GPUs, evaluation on every rank or on one where the run has one, ranks in step.
"""
from __future__ import annotations

from collections import Counter
from statistics import median
from typing import Any

SAME_SAMPLES = 0.9           # of a rank's first samples, alike on another rank: the same data, not its shard
STRAGGLER_SHARE = 0.25       # of a step spent waiting for the slowest rank (median over the measured steps)
STRAGGLER_STEPS = 0.75       # of the measured steps in which the same rank is the last to reach the all-reduce
MIN_SPANS = 4                # measured steps per rank before the straggler detector judges
SCALE_TOLERANCE = 0.05       # a step's gradient within 5% of one device's: the same (shards differ in size)


def _who(r: dict[str, Any]) -> str:
    p = r.get("process") or {}
    return f"{p.get('role')} {p.get('index')}" if p.get("role") in ("rank", "worker") else "the script's process"


def _samples(r: dict[str, Any], epoch: str) -> list[float]:
    return (((r.get("probe") or {}).get("evidence") or {}).get("samples") or {}).get(epoch, {}).get(
        "fingerprints") or []


def _alike(a: list[float], b: list[float]) -> float:
    """The share of a's samples found among b's (each sample by the sum of its inputs)."""
    if not a or not b:
        return 0.0
    return sum((Counter(a) & Counter(b)).values()) / len(a)


def same_samples(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    first = [(r, _samples(r, "1")) for r in ranks]
    alike = [(a, b, _alike(sa, sb)) for i, (a, sa) in enumerate(first) for b, sb in first[i + 1:] if sa and sb]
    twins = [(a, b, share) for a, b, share in alike if share >= SAME_SAMPLES]
    if not twins:
        return []
    a, b, share = twins[0]
    n = len(ranks)
    return [{"code": "ranks-same-samples", "severity": "error",
             "message": f"{_who(a)} and {_who(b)} trained on the same samples: {share:.0%} of the first "
                        f"{len(_samples(a, '1'))} samples of epoch 1 alike (each sample by its inputs' sum); each "
                        f"rank reads all the data where a DistributedSampler gives each its own shard, so "
                        f"{(n - 1) / n:.0%} of the run's samples repeat another rank's (its throughput counts each "
                        f"sample {n} times)"}]


def same_order(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for r in ranks:
        one, two = _samples(r, "1"), _samples(r, "2")
        if len(one) >= 2 and one == two[:len(one)]:
            found.append(r)
    if not found:
        return []
    return [{"code": "same-order-every-epoch", "severity": "warning",
             "message": f"{', '.join(map(_who, found))} took epoch 2's first {len(_samples(found[0], '2'))} samples "
                        f"in epoch 1's order: a DistributedSampler shuffles each epoch only where the script calls "
                        f"its set_epoch(epoch) first, so every epoch sees the same order"}]


def slower_collectives(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    on_gpu = [r for r in ranks if (r.get("process") or {}).get("backend") == "gloo"
              and (r.get("environment") or {}).get("device") == "gpu"]
    if not on_gpu:
        return []
    return [{"code": "collectives-on-gloo", "severity": "warning",
             "message": f"{', '.join(map(_who, on_gpu))} ran their collectives on gloo, through the host, while their "
                        f"models trained on GPUs, where NCCL is the collectives' backend: every all-reduce copies the "
                        f"gradients to the host and back (horovod #912's case); its share of the step is not "
                        f"measured in a run that has no NCCL twin"}]


def evaluation_on_one(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tested = [r for r in ranks if (r.get("effective") or {}).get("test_samples")]
    if len(ranks) < 2 or len(tested) != 1:
        return []
    r, n = tested[0], len(ranks)
    epochs = (r.get("timing") or {}).get("epochs") or []
    evals = sum(e.get("eval_s") or 0.0 for e in epochs)
    wall = sum((e.get("train_s") or 0.0) + (e.get("eval_s") or 0.0) for e in epochs)
    share = f"; evaluation is {evals / wall:.0%} of its epochs' time, of which {(n - 1) / n:.0%} the other ranks " \
            f"would share" if wall else ""
    return [{"code": "evaluation-on-one-rank", "severity": "info",
             "message": f"{_who(r)} evaluated alone ({r['effective']['test_samples']:,} samples) while the other "
                        f"{n - 1} rank(s) evaluated none{share}"}]


def straggler(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A rank the others wait for: step by step, the rank with the shortest span from its forward pass's end to
    its optimizer step arrived last at the all-reduce; where the same rank does in most steps, the others' extra
    span is their wait for it, judged against their step time."""
    spans = {id(r): ((r.get("probe") or {}).get("evidence") or {}).get("backward_span_s") or [] for r in ranks}
    judged = [r for r in ranks if len(spans[id(r)]) >= MIN_SPANS]
    step = {id(r): ((r.get("timing") or {}).get("step_s") or {}).get("p50") for r in judged}
    if len(judged) < 2 or not all(step.values()):
        return []
    steps = min(len(spans[id(r)]) for r in judged)
    last = [min(judged, key=lambda r: spans[id(r)][k]) for k in range(steps)]
    slowest = max(judged, key=lambda r: sum(x is r for x in last))
    if sum(x is slowest for x in last) < STRAGGLER_STEPS * steps:
        return []                          # no rank is the last in most steps: the ranks are in step
    waits = {id(r): median(spans[id(r)][k] - spans[id(slowest)][k] for k in range(steps)) / step[id(r)]
             for r in judged if r is not slowest}
    waiting = [r for r in judged if r is not slowest and waits[id(r)] >= STRAGGLER_SHARE]
    if not waiting:
        return []
    worst = max(waits[id(r)] for r in waiting)
    return [{"code": "straggler", "severity": "warning",
             "message": f"{_who(slowest)} is the slowest rank: the last to reach the gradients' all-reduce in "
                        f"{sum(x is slowest for x in last)} of {steps} measured steps; {', '.join(map(_who, waiting))} "
                        f"spent {worst:.0%} of a step (median) waiting for it (from the end of each forward pass to "
                        f"the optimizer step: {median(spans[id(slowest)]) * 1e3:.1f} ms on {_who(slowest)}, "
                        f"{max(median(spans[id(r)]) for r in waiting) * 1e3:.1f} ms on the others)"}]


def loss_scale(trained: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A step whose gradient is not the gradient at one device on the same global batch: its loss scaled by the
    per-replica batch (N times the gradient), or by the global batch twice."""
    for r in trained:
        scale = ((r.get("probe") or {}).get("evidence") or {}).get("loss_scale") or {}
        factor, summed = scale.get("factor"), scale.get("replicas_summed") or 1
        if factor is None or abs(factor - 1) <= SCALE_TOLERANCE:
            continue
        per = scale["per_replica"]
        return [{"code": "loss-scaled-per-replica" if summed > 1 and abs(per - 1) <= SCALE_TOLERANCE else
                 "loss-scale", "severity": "error",
                 "message": f"{_who(r)}'s step takes {factor:.2f} times the gradient one device takes on the same "
                            f"global batch: each replica differentiates {per:.3g} times its batch's mean loss, and "
                            f"the update sums {summed} replicas' gradients; scale each replica's loss by the global "
                            f"batch (tf.nn.compute_average_loss with global_batch_size), so that they add up to the "
                            f"mean: its learning rate is in effect {factor:.2f} times the one it sets"}]
    return []


def findings(trained: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every finding of the run's processes: its loss's scale in any, the rest between the ranks of a group."""
    ranks = [r for r in trained if (r.get("process") or {}).get("role") == "rank"]
    found = [*loss_scale(trained), *slower_collectives(ranks)]     # one rank on gloo beside its GPU model too
    if len(ranks) < 2:
        return found
    return [*found, *same_samples(ranks), *same_order(ranks), *evaluation_on_one(ranks), *straggler(ranks)]

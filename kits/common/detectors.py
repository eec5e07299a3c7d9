"""Run-time detectors: each judges from evidence the run produced, never from its pitfall switches.

A finding is {"code", "severity", "message"}; the message carries the evidence.
"""
from __future__ import annotations

import numpy as np

from kits.common.spec import RunSpec
from kits.common.training import Measurements

MEMORY_GROWTH_MIN_BYTES = 32 * 2**20     # below this, allocator noise
INPUT_BOUND_FRACTION = 0.3               # of training time spent waiting for the next batch


def _finding(code: str, severity: str, message: str) -> dict:
    return {"code": code, "severity": severity, "message": message}


def effective_batch(spec: RunSpec, m: Measurements) -> list[dict]:
    configured = spec.train.batch_size
    sizes = np.asarray(m.observed_batch_sizes)
    if sizes.size and sizes.max() < configured:
        return [_finding("effective-batch-size", "error",
                         f"configured batch size {configured}, but the model received at most {int(sizes.max())} "
                         f"sample(s) per step over {sizes.size} steps ({int(sizes.sum())} samples in all)")]
    return []


def memory_growth(spec: RunSpec, m: Measurements, source: str) -> list[dict]:
    """A steady rise over the second half of training: something keeps every step's tensors alive."""
    points = [(s, b) for s, b in m.memory_over_steps if s > spec.train.warmup_steps]
    half = points[len(points) // 2:]
    if len(half) < 4:
        return []
    steps, mem = (np.asarray(v, dtype=np.float64) for v in zip(*half))
    slope = np.polyfit(steps, mem, 1)[0]
    growth = slope * (steps[-1] - steps[0])
    if growth > MEMORY_GROWTH_MIN_BYTES and mem[-1] > mem[0]:
        return [_finding("memory-growth", "error",
                         f"{source} grew by {growth / 2**20:,.0f} MiB between steps {int(steps[0])} and "
                         f"{int(steps[-1])} ({slope / 2**10:,.0f} KiB per step): tensors from every step are being "
                         f"kept alive (e.g. a loss or metric accumulated with its autograd graph)")]
    return []


def modes(observed: dict) -> list[dict]:
    out = []
    if observed.get("grad_enabled_in_eval"):
        out.append(_finding("grad-in-eval", "warning",
                            f"gradient tracking was on during evaluation ({observed['grad_enabled_in_eval']} "
                            f"of {observed['eval_steps']} evaluation steps): every forward pass builds a graph"))
    if observed.get("eval_mode_in_train"):
        out.append(_finding("eval-mode-in-train", "error",
                            f"the model was in evaluation mode during {observed['eval_mode_in_train']} of "
                            f"{observed['train_steps']} training steps: Dropout off, BatchNorm frozen on its "
                            f"running statistics"))
    return out


def loss_inputs(observed: dict) -> list[dict]:
    probe = observed.get("loss_input_probe")
    if probe and probe["expects_logits"] and probe["nonnegative"] and probe["max_row_sum_error"] < 1e-4:
        return [_finding("probabilities-into-logit-loss", "error",
                         f"the loss expects logits but received rows that are non-negative and sum to 1 "
                         f"(max |sum - 1| = {probe['max_row_sum_error']:.1e} over {probe['rows']} rows): "
                         f"softmax applied twice")]
    return []


def metric_averaging(m: Measurements, reported: list[dict], sums: list[dict]) -> list[dict]:
    """Compare the accuracy the code reported with correct / samples from the same sums."""
    for epoch, (rep, raw) in enumerate(zip(reported, sums), 1):
        if not raw["train_samples"] or rep["train_accuracy"] is None:
            continue
        per_sample = raw["train_correct"] / raw["train_samples"]
        if abs(rep["train_accuracy"] - per_sample) > 1e-9:
            return [_finding("metrics-not-per-sample", "error",
                             f"epoch {epoch} train accuracy reported as {rep['train_accuracy']:.4f}, but "
                             f"{raw['train_correct']:.0f} correct of {raw['train_samples']} samples is "
                             f"{per_sample:.4f}: the sums were divided by {raw['train_correct'] / rep['train_accuracy']:.0f} "
                             f"(the number of batches), not by the number of samples")]
    return []


def input_bound(m: Measurements) -> list[dict]:
    if m.measured_train_s > 0 and m.data_wait_s / m.measured_train_s > INPUT_BOUND_FRACTION:
        return [_finding("input-bound", "warning",
                         f"{m.data_wait_s / m.measured_train_s:.0%} of training time was spent waiting for the "
                         f"next batch ({m.data_wait_s:.1f} s of {m.measured_train_s:.1f} s): the input pipeline, "
                         f"not the model, sets the speed")]
    return []


def all_findings(spec: RunSpec, m: Measurements, observed: dict, source: str) -> list[dict]:
    return (effective_batch(spec, m) + memory_growth(spec, m, source) + modes(observed) +
            loss_inputs(observed) + metric_averaging(m, m.epoch_metrics, m.epoch_sums) + input_bound(m))

"""Run-time detectors: each judges from evidence the run produced, never from its pitfall switches.

A finding is {"code", "severity", "message"}; the message carries the evidence. The evidence is
what the kit observed around the code that ran, the user's own included (their model, input
pipeline, evaluation step and metrics hooks): the tensors' shapes at every step, the grad mode and
module mode at every forward pass, the memory over steps, the rows the loss received, and correct
and samples counted by the kit itself from the outputs it saw.

One detector no user hook can exercise, ``eval-mode-in-train`` (the kit's loop sets the module's
mode; only the kit's own reproduction of a post's ``model.eval()`` changes it), marks its
finding ``declared``: it reproduces what a post did, it has never caught a user's code doing it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.training_loop.training import Measurements

INPUT_BOUND_FRACTION = 0.3               # of training time spent waiting for the next batch
# and at least this long: a few milliseconds of waiting over steps of a millisecond (a batch of one) are the
# scheduler's noise on a busy host, not a pipeline that sets the speed
INPUT_BOUND_MIN_S = 0.25
# Memory growth: a trend over windows of the sampled memory, not one jump. The rise over the fitted
# steps must exceed a share of the model's own training footprint (parameters, gradients and the
# optimizer's state), and at least the allocator's noise.
GROWTH_WINDOWS = 6
GROWTH_SHARE_OF_FOOTPRINT = 0.5
GROWTH_FLOOR_BYTES = 32 * 2**20         # a process's resident memory moves by this much without a leak
GROWTH_LARGEST_STEP = 0.5                # a rise half of which is one step between windows is a jump
GROWTH_STILL_RISING = 0.5                # a leak still rises in the last half: at half its overall slope at least
DECLARED = {
    "eval-mode-in-train": "no user hook sets the module's mode while training (the kit's loop does), so only the "
                          "kit's reproduction of a post's model.eval() called once can cause it",
}


def _finding(code: str, severity: str, message: str) -> dict[str, Any]:
    out = {"code": code, "severity": severity, "message": message}
    if code in DECLARED:
        out["declared"] = DECLARED[code]
    return out


def effective_batch(configured: int, sizes: list[int], expected_short: int) -> list[dict[str, Any]]:
    """Every training step's batch, as the model received it: the share of steps short of the configured size.
    ``expected_short`` steps may be short by design (each epoch's last batch where drop_last is off)."""
    batches = np.asarray(sizes)
    short = batches < configured
    if not batches.size or short.sum() <= expected_short:
        return []
    n = int(short.sum())
    return [_finding("effective-batch-size", "error" if n * 2 >= batches.size else "warning",
                     f"configured batch size {configured}, but {n} of {batches.size} training steps "
                     f"({n / batches.size:.0%}) received fewer samples (as few as {int(batches.min())}; "
                     f"{int(batches.sum())} samples in all, "
                     f"{batches.mean():.1f} per step)")]


def memory_growth(points: list[tuple[int, int]], warmup: int, series: str,
                  footprint_bytes: int) -> list[dict[str, Any]]:
    """A steady rise: the medians of consecutive windows of the memory sampled after warmup rise (all steps
    between windows but one), no single step makes half the rise and the last half of the windows still rises
    (else it is a jump: something allocated once, or kept from one phase to the next), and the trend through
    them adds more than the threshold over the fitted steps."""
    pts = np.asarray([p for p in points if p[0] > warmup], dtype=np.float64)
    if len(pts) < GROWTH_WINDOWS:
        return []
    windows = np.array_split(pts, GROWTH_WINDOWS)
    steps = np.array([np.median(w[:, 0]) for w in windows])
    level = np.array([np.median(w[:, 1]) for w in windows])
    between = np.diff(level)
    rises = int((between > 0).sum())
    slope = np.polyfit(steps, level, 1)[0]
    growth = slope * (pts[-1, 0] - pts[0, 0])
    threshold = max(GROWTH_FLOOR_BYTES, GROWTH_SHARE_OF_FOOTPRINT * footprint_bytes)
    late = GROWTH_WINDOWS // 2
    jump = (between.max() > GROWTH_LARGEST_STEP * (level[-1] - level[0])
            or np.polyfit(steps[late:], level[late:], 1)[0] < GROWTH_STILL_RISING * slope)
    if rises < GROWTH_WINDOWS - 2 or jump or growth <= threshold:
        return []
    return [_finding("memory-growth", "error",
                     f"{series} rose steadily by {growth / 2**20:,.0f} MiB between steps {int(pts[0, 0])} and "
                     f"{int(pts[-1, 0])} ({slope / 2**10:,.0f} KiB per step; {rises} of {GROWTH_WINDOWS - 1} windows "
                     f"higher than the one before), more than {threshold / 2**20:,.0f} MiB (half the model's training "
                     f"footprint of {footprint_bytes / 2**20:,.2f} MiB, at least {GROWTH_FLOOR_BYTES >> 20} MiB): "
                     f"tensors from every step are being kept alive (e.g. activations, outputs or losses collected "
                     f"in a list, or graphs that no backward pass frees)")]


def modes(observed: dict[str, Any], declared: bool = True) -> list[dict[str, Any]]:
    """The grad and module modes of the model's forward passes. ``declared`` marks eval-mode-in-train a
    declared reproduction (a kit run: only its reproduction of a post's model.eval() can cause it); a
    probed script's is the script's own."""
    out = []
    if observed.get("grad_enabled_in_eval"):
        out.append(_finding("grad-in-eval", "warning",
                            f"gradient tracking was on in {observed['grad_enabled_in_eval']} of "
                            f"{observed['eval_forwards']} forward passes of the model during evaluation: each builds "
                            f"a graph that holds its activations"))
    if observed.get("eval_mode_in_train"):
        found = _finding("eval-mode-in-train", "error",
                         f"the model was in evaluation mode in {observed['eval_mode_in_train']} of "
                         f"{observed['train_forwards']} forward passes during training: Dropout off, BatchNorm "
                         f"frozen on its running statistics")
        if not declared:
            found.pop("declared", None)
        out.append(found)
    return out


def loss_inputs(observed: dict[str, Any]) -> list[dict[str, Any]]:
    probe = observed.get("loss_input_probe")
    if probe and probe["expects_logits"] and probe["nonnegative"] and probe["max_row_sum_error"] < 1e-4:
        return [_finding("probabilities-into-logit-loss", "error",
                         f"the loss expects logits but received rows that are non-negative and sum to 1 "
                         f"(max |sum - 1| = {probe['max_row_sum_error']:.1e} over {probe['rows']} rows): "
                         f"softmax applied twice")]
    return []


def metric_averaging(reported: list[dict[str, Any]], counted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The accuracy the run reported against correct / samples the kit counted in the outputs it observed."""
    for rep, seen in zip(reported, counted):
        for split in ("train", "test"):
            acc, correct, samples = rep.get(f"{split}_accuracy"), seen[f"{split}_correct"], seen[f"{split}_samples"]
            if acc is None or not samples or abs(acc - correct / samples) <= 1e-6:
                continue
            divisor = correct / acc if acc else float("nan")
            steps = seen[f"{split}_steps"]
            why = (f"the number of batches ({steps})" if abs(divisor - steps) < 0.5
                   else f"{divisor:,.1f}, not the number of samples")
            return [_finding("metrics-not-per-sample", "error",
                             f"epoch {rep['epoch']} {split} accuracy was reported as {acc:.4f}, but the kit counted "
                             f"{correct:.0f} correct of {samples} samples in the outputs it observed "
                             f"({correct / samples:.4f}): the count was divided by {why}")]
    return []


def input_bound(m: Measurements) -> list[dict[str, Any]]:
    if m.data_wait_s >= INPUT_BOUND_MIN_S and m.data_wait_s / m.measured_train_s > INPUT_BOUND_FRACTION:
        return [_finding("input-bound", "warning",
                         f"{m.data_wait_s / m.measured_train_s:.0%} of training time was spent waiting for the "
                         f"next batch ({m.data_wait_s:.1f} s of {m.measured_train_s:.1f} s): the input pipeline, "
                         f"not the model, sets the speed")]
    return []


def shapes_after_warmup(m: Measurements, warmup: int) -> list[dict[str, Any]]:
    """Batch sizes a timed phase met first: their first step pays for autotuning, a retrace or a compile, and
    its workspaces count in that phase's peak. The warmup runs every training step's size it reaches and one
    evaluation step of each size (training.warm_shapes); a training size first seen later is reported."""
    warmed = set(m.observed_batch_sizes[:warmup])
    late = {}
    for step, size in enumerate(m.observed_batch_sizes[warmup:], warmup + 1):
        if size not in warmed and size not in late:
            late[size] = step
    out = [f"training batch size {size} first at step {step}" for size, step in late.items()]
    if m.warmed_eval_sizes:              # a kit run warms its evaluation shapes up; a probed script does not
        out += [f"evaluation batch size {size}" for size in m.eval_batch_sizes if size not in m.warmed_eval_sizes]
    if not out:
        return []
    return [_finding("shape-after-warmup", "info",
                     f"{'; '.join(out)}: first met after warmup, so its first step's autotuning or tracing is timed "
                     f"and its workspaces count in that phase's memory peak")]


def loader_in_process(m: Measurements, workers: int | None) -> list[dict[str, Any]]:
    """Data wait dominates the step, and the training loader prepares its batches in the training process."""
    if workers == 0 and m.measured_train_s > 0 and m.data_wait_s / m.measured_train_s > INPUT_BOUND_FRACTION:
        return [_finding("loader-in-process", "warning",
                         f"the training DataLoader has num_workers=0: its images are decoded and transformed in the "
                         f"training process, between steps ({m.data_wait_s / m.measured_train_s:.0%} of training "
                         f"time waiting for batches)")]
    return []


def eager_custom_loop(eager: bool) -> list[dict[str, Any]]:
    if not eager:
        return []
    return [_finding("eager-custom-loop", "warning",
                     "the custom training loop's steps ran eagerly (Optimizer.apply_gradients was called outside any "
                     "tf.function): TensorFlow dispatches each op from Python, where its fast path traces the step "
                     "once into a graph")]


def model_not_on_gpu(framework: str, gpu: str | None, utilization: dict[str, Any] | None,
                     why_not: str | None) -> list[dict[str, Any]]:
    """A GPU run whose model stayed on the CPU, as the script chose: measured there. The evidence of the idle GPU
    is NVML's utilisation of the first visible GPU, sampled over the training phases after warmup."""
    u = utilization or {}
    n = u.get("samples") or 0
    if n:
        seen = (f"NVML sampled it idle (utilisation 0%) in {u['idle_samples']} of {n} samples "
                f"({u['idle_samples'] / n:.0%}) over the measured training steps, {u['mean_percent']}% busy on average")
    else:
        seen = f"its idle time was not measured ({why_not or u.get('unread') or 'NVML took no sample'})"
    return [_finding("model-not-on-gpu", "warning",
                     f"the script's {framework} model trained on the CPU while a GPU was available "
                     f"({gpu or 'the first visible GPU'}): the run is measured on the CPU, as the script chose; "
                     f"{seen}")]


def script_findings(m: Measurements, configured: int, seen: dict[str, Any], warmup: int, series: str,
                    footprint_bytes: int, workers: int | None, eager_tf_loop: bool) -> list[dict[str, Any]]:
    """A probed script's findings, from what its frameworks showed (reprokit/kits/observation/observe.py): an epoch's
    last batch may be short (a DataLoader keeps it by default)."""
    return (effective_batch(configured, m.observed_batch_sizes, len(m.steps_per_epoch)) +
            memory_growth(m.memory_over_steps, warmup, series, footprint_bytes) + modes(seen, declared=False) +
            loss_inputs(seen) + input_bound(m) + loader_in_process(m, workers) + shapes_after_warmup(m, warmup) +
            eager_custom_loop(eager_tf_loop))


def training_footprint(spec: RunSpec, parameters: int) -> int:
    """The model's own training memory in fp32: its parameters, their gradients and the optimizer's state
    (Adam keeps two moments, SGD with momentum one velocity)."""
    opt = spec.train.optimizer
    slots = 2 if opt.name == "adam" else (1 if opt.momentum else 0)
    return 4 * parameters * (2 + slots)


def all_findings(spec: RunSpec, m: Measurements, observed: dict[str, Any], series: str,
                 footprint_bytes: int) -> list[dict[str, Any]]:
    batch = spec.train.batch_size
    short_by_design = 0 if spec.data.drop_last else len(m.steps_per_epoch)
    return (effective_batch(batch, m.observed_batch_sizes, short_by_design) +
            memory_growth(m.memory_over_steps, spec.train.warmup_steps, series, footprint_bytes) + modes(observed) +
            loss_inputs(observed) + metric_averaging(m.epoch_metrics, m.counted) + input_bound(m) +
            shapes_after_warmup(m, spec.train.warmup_steps))

"""The equivalence certificate's framework-free half: canonical names, fixed inputs, weights files, comparisons.

Runs inside each framework's environment (standard library and numpy only) and
on the host, which imports the comparisons from here.

Canonical form (Keras's layout, so that a TensorFlow model needs no conversion):

- parametric layers are numbered per kind in execution order: ``conv 1``,
  ``conv 2``, ..., ``dense 1``, ..., ``batchnorm 1``, ...;
- a parameter's canonical name is ``<kind><index>.<role>``, e.g. ``conv1.kernel``;
- conv kernel HWIO ``(kh, kw, in, out)``; dense kernel ``(in, out)``;
  BatchNorm ``gamma``, ``beta``, ``moving_mean``, ``moving_variance``;
- the rows of a dense kernel fed by a Flatten of a feature map are in NHWC
  flatten order ``(h, w, c)``; PyTorch flattens NCHW as ``(c, h, w)``, so its
  kit permutes those rows using the feature map's shape.
"""
from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np

from kits.common import data as datalib
from kits.common.files import atomic_file

SIDE_SCHEMA = "reprokit.certificate-side/1"
LOGITS_SAMPLES = 8          # the fixed batch: the first test samples
STEPS = 10                  # optimizer steps of the loss trajectory
FLOPS_BATCH = 2             # samples in the batch whose forward+backward the counters count

LABELS = {"pytorch": "PyTorch", "tensorflow": "TensorFlow"}


class UnmappableModel(Exception):
    """The model has a layer with weights that has no canonical form: it cannot be compared layer by layer."""


class WeightsMismatch(Exception):
    """A weights file that does not fit the model (its message is one sentence)."""


class InputError(ValueError):
    """The spec's data cannot give the certificate its fixed batch or its steps (one sentence)."""


def label(framework: str) -> str:
    return LABELS.get(framework, framework)


def canonical_name(kind: str, index: int, role: str) -> str:
    return f"{kind}{index}.{role}"


def record(kind: str, index: int, role: str, shape, native_name: str, native_shape) -> dict:
    shape = [int(s) for s in shape]
    return {"layer": f"{kind} {index}", "kind": kind, "index": index, "role": role,
            "name": canonical_name(kind, index, role), "shape": shape, "count": int(math.prod(shape)),
            "native": {"name": native_name, "shape": [int(s) for s in native_shape]}}


def shape_text(shape) -> str:
    return str(tuple(int(s) for s in shape))


# -- the inputs both frameworks see -------------------------------------------------------------

def step_batch_size(spec: dict) -> int:
    """The spec's own batch size, never smaller: BatchNorm's batch statistics depend on it, and at a
    quarter of its batch the quick SimpleCNN's ten-step trajectory became chaotic (a relative
    perturbation of 1e-12 of the initial weights grew to 1.5e-3 within PyTorch alone)."""
    return spec["train"]["batch_size"]


def fixed_batch(arrays: datalib.Arrays) -> tuple[np.ndarray, np.ndarray]:
    """The first LOGITS_SAMPLES test samples, uint8 NHWC, as the kit's feeder slices them."""
    n = min(LOGITS_SAMPLES, len(arrays.x_test))
    if n == 0:
        raise InputError("the dataset has no test samples, so the certificate has no fixed batch for its logits")
    return arrays.x_test[:n], arrays.y_test[:n]


def step_batches(spec: dict, arrays: datalib.Arrays) -> list[tuple[np.ndarray, np.ndarray]]:
    """The first STEPS training batches in the order the kit trains on them: epoch 1's order
    (kits.common.data.epoch_order), then epoch 2's where epoch 1 has fewer batches."""
    size = step_batch_size(spec)
    n = len(arrays.x_train)
    if n < size:
        raise InputError(f"the certificate needs training batches of {size} samples but the dataset has "
                         f"{n} training samples")
    out: list[tuple[np.ndarray, np.ndarray]] = []
    epoch = 1
    while len(out) < STEPS:
        order = datalib.epoch_order(n, spec["train"]["seed"], epoch, spec["data"]["shuffle"])
        for idx in datalib.batches(order, size, True):
            out.append((arrays.x_train[idx], arrays.y_train[idx]))
            if len(out) == STEPS:
                break
        epoch += 1
    return out


def preprocess64(x: np.ndarray, scale: float, size: int | None) -> np.ndarray:
    """uint8 NHWC -> float64 NHWC, scaled, resized bilinearly with half-pixel centres and no antialias.

    What both kits do on the device in fp32 (torch.nn.functional.interpolate(align_corners=False,
    antialias=False), tf.image.resize(method="bilinear", antialias=False)), computed once in float64
    so that the fp64 trajectory compares models and optimizers, not two resize kernels' rounding.
    """
    out = x.astype(np.float64) * scale
    if size is None or (out.shape[1] == size and out.shape[2] == size):
        return out
    for axis in (1, 2):
        n_in = out.shape[axis]
        src = (np.arange(size, dtype=np.float64) + 0.5) * (n_in / size) - 0.5
        src = np.clip(src, 0.0, n_in - 1)
        lo = np.floor(src).astype(np.int64)
        hi = np.minimum(lo + 1, n_in - 1)
        w = (src - lo).reshape([-1 if a == axis else 1 for a in range(4)])
        out = np.take(out, lo, axis=axis) * (1.0 - w) + np.take(out, hi, axis=axis) * w
    return out


def float32_rounded(x: float) -> float:
    return float(np.float32(x))


def torch_hyperparameters_like_keras(opt: dict, t: int) -> dict:
    """torch.optim hyper-parameters for step t (1-based) whose update equals Keras 3's in float64.

    Two things differ. (1) Adam's epsilon placement, a declared semantic difference: torch adds eps to
    sqrt(v_hat), Keras to sqrt(v) with the bias corrections folded into the step size, so Keras's eps
    is torch's eps / sqrt(1 - beta2^t). (2) Keras 3 turns momentum, beta_1 and beta_2 (Python floats)
    into tensors through float32 (ops.cast), so even a float64 Keras model uses momentum 0.899999976
    and bias corrections 1 - 0.899999976^t, 1 - 0.999000013^t (its m and v updates use the exact
    1 - beta); the learning rate is a float64 variable and epsilon is added exactly. Measured on
    TF 2.21 / Keras 3.15; without (2) the fp64 trajectories part by 1e-8 (SGD) to 1e-3 (Adam, whose
    update is close to lr * sign(g) and flips with a gradient's sign) within ten steps.
    """
    if opt["name"] == "adam":
        b1, b2 = opt["beta1"], opt["beta2"]
        b1k, b2k = float32_rounded(b1), float32_rounded(b2)
        lr = opt["lr"] * (math.sqrt(1 - b2k ** t) / (1 - b1k ** t)) * ((1 - b1 ** t) / math.sqrt(1 - b2 ** t))
        return {"lr": lr, "eps": opt["epsilon"] / math.sqrt(1 - b2 ** t)}
    return {"lr": opt["lr"], "momentum": float32_rounded(opt["momentum"])}


# -- weights files ------------------------------------------------------------------------------

def save_weights(path: str | Path, weights: dict[str, np.ndarray]) -> None:
    """One array per canonical name, float32, in an .npz any framework can read."""
    with atomic_file(path, "wb") as fh:
        np.savez(fh, **{k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()})


def load_weights(path: str | Path, records: list[dict]) -> dict[str, np.ndarray]:
    """The arrays of a canonical weights file, refused with one sentence unless they fit these records."""
    path = Path(path)
    if not path.is_file():
        raise WeightsMismatch(f"the weights file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as npz:
            weights = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise WeightsMismatch(f"the weights file {path} is not a readable .npz of arrays ({exc})") from None
    expected = {r["name"]: r["shape"] for r in records}
    missing = [n for n in expected if n not in weights]
    extra = [n for n in weights if n not in expected]
    wrong = [f"{n} is {shape_text(weights[n].shape)}, the model's is {shape_text(s)}"
             for n, s in expected.items() if n in weights and list(weights[n].shape) != list(s)]
    problems = []
    if missing:
        problems.append(f"it lacks {_some(missing)}")
    if extra:
        problems.append(f"it has {_some(extra)} which the model does not")
    if wrong:
        problems.append(_some(wrong))
    if problems:
        raise WeightsMismatch(f"the weights file {path} does not match the model "
                              f"({len(expected)} canonical parameters): {'; '.join(problems)}")
    bad = [n for n, a in weights.items() if not np.issubdtype(a.dtype, np.floating) or not np.isfinite(a).all()]
    if bad:
        raise WeightsMismatch(f"the weights file {path} has non-float or non-finite values in {_some(bad)}")
    return {n: weights[n].astype(np.float32) for n in expected}


def _some(items: list[str], k: int = 3) -> str:
    return ", ".join(items[:k]) + (f" and {len(items) - k} more" if len(items) > k else "")


# -- comparisons (used by the host) ------------------------------------------------------------

def _kinds(records: list[dict]) -> str:
    counts: dict[str, int] = {}
    for r in records:
        counts[r["kind"]] = max(counts.get(r["kind"], 0), r["index"])
    return ", ".join(f"{n} {k}" for k, n in counts.items()) or "no parametric layers"


def compare_layers(records: dict[str, list[dict]]) -> dict:
    """Per-layer canonical shapes and counts. passed False with every mismatch named; mapped False
    when the layer lists themselves differ (then no weights can be carried from one to the other)."""
    (fa, ra), (fb, rb) = records.items()
    la, lb = label(fa), label(fb)
    totals = {fa: sum(r["count"] for r in ra), fb: sum(r["count"] for r in rb)}
    names_a, names_b = [r["name"] for r in ra], [r["name"] for r in rb]
    numbers = {"parameters": totals, "tensors": {fa: len(ra), fb: len(rb)}}
    if names_a != names_b:
        i = next((i for i, (x, y) in enumerate(zip(names_a, names_b)) if x != y), min(len(ra), len(rb)))
        at_a = names_a[i] if i < len(names_a) else "nothing (its list ends)"
        at_b = names_b[i] if i < len(names_b) else "nothing (its list ends)"
        evidence = (f"not the same model: the layer lists differ ({la}: {_kinds(ra)}; {lb}: {_kinds(rb)}); "
                    f"first difference at parameter {i + 1}: {la} has {at_a}, {lb} has {at_b}; "
                    f"{totals[fa]:,} vs {totals[fb]:,} parameters")
        return {"name": "layers", "passed": False, "mapped": False, "evidence": evidence,
                "mismatches": [evidence], "numbers": numbers}
    mismatches = [f"{x['layer']} {x['role']}: {la} {shape_text(x['shape'])} vs {lb} {shape_text(y['shape'])}"
                  for x, y in zip(ra, rb) if x["shape"] != y["shape"]]
    if mismatches:
        evidence = (f"not the same model: {len(mismatches)} parameter shape(s) differ: {'; '.join(mismatches)}; "
                    f"{totals[fa]:,} vs {totals[fb]:,} parameters")
    else:
        evidence = (f"{len(ra)} parameter tensors in {_kinds(ra)} layers match in canonical shape and count "
                    f"({totals[fa]:,} parameters each; NCHW/OIHW mapped to NHWC/HWIO)")
    return {"name": "layers", "passed": not mismatches, "mapped": not mismatches, "evidence": evidence,
            "mismatches": mismatches, "numbers": numbers}


def compare_flops(flops: dict[str, dict], rtol: float) -> dict:
    """Training FLOPs per sample (forward and backward), each side from its own counter.

    Compared on what both counters count: convolutions and matrix products (2 FLOPs per
    multiply-accumulate); the TensorFlow profiler's elementwise ops are reported beside them.
    """
    (fa, a), (fb, b) = flops.items()
    la, lb = label(fa), label(fb)
    x, y = a["per_sample"]["matmul_conv"], b["per_sample"]["matmul_conv"]
    rel = abs(x - y) / max(abs(x), abs(y)) if max(abs(x), abs(y)) > 0 else 0.0
    ratio = x / y if y else math.inf
    passed = rel <= rtol
    extra = []
    for f, side in ((fa, a), (fb, b)):
        total = side["per_sample"]["total"]
        if total != side["per_sample"]["matmul_conv"]:
            extra.append(f"{label(f)}'s counter also counts elementwise ops: {total:,.0f} in all")
    evidence = (f"training FLOPs per sample (forward + backward, convolutions and matrix products): "
                f"{la} {x:,.0f} ({a['counter']}) vs {lb} {y:,.0f} ({b['counter']}), ratio {ratio:.6f}, "
                f"relative difference {rel:.2e} {'<=' if passed else '>'} {rtol:g}"
                + (f"; {'; '.join(extra)}" if extra else ""))
    return {"name": "flops", "passed": passed, "evidence": evidence,
            "numbers": {"per_sample": {fa: x, fb: y}, "all_ops_per_sample": {fa: a["per_sample"]["total"],
                                                                            fb: b["per_sample"]["total"]},
                        "ratio": ratio, "relative_difference": rel,
                        "conventions": {fa: a["conventions"], fb: b["conventions"]}}}


def max_abs_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def compare_logits(logits: dict[str, dict], atol: float) -> dict:
    """The same initial weights on the same fixed batch: fp32 in evaluation mode (as the kit runs),
    fp64 in evaluation and in training mode (batch statistics)."""
    (fa, a), (fb, b) = logits.items()
    la, lb = label(fa), label(fb)
    numbers, parts, passed, n = {}, [], True, 0
    for precision in a:
        for mode in a[precision]:
            key = f"{precision} {mode}"
            xa = np.asarray(a[precision][mode], np.float64)
            xb = np.asarray(b.get(precision, {}).get(mode, []), np.float64)
            n = len(xa)
            if xa.shape != xb.shape:
                parts.append(f"{key} mode: {la} gives outputs of shape {shape_text(xa.shape)}, "
                             f"{lb} {shape_text(xb.shape)}")
                numbers[key] = None
                passed = False
                continue
            diff = max_abs_diff(xa, xb)
            scale = float(np.max(np.abs(xa)))
            ok = diff <= atol
            passed &= ok
            numbers[key] = {"max_abs_diff": diff, "max_abs_logit": scale}
            parts.append(f"{key} mode max |diff| {diff:.2e} {'<=' if ok else '>'} {atol:g} (largest |logit| {scale:.3g})")
    evidence = f"logits of the same initial weights on the first {n} test samples: " + "; ".join(parts)
    return {"name": "logits", "passed": passed, "evidence": evidence, "numbers": numbers}


def relative_diffs(a: list[float], b: list[float]) -> list[float]:
    return [abs(x - y) / max(abs(x), abs(y)) if max(abs(x), abs(y)) > 0 else 0.0 for x, y in zip(a, b)]


def compare_losses(losses: dict[str, list[float]], rtol: float | None, setup: str,
                   name: str = "loss_trajectory") -> dict:
    """Per-step relative differences of two loss trajectories; rtol None: informational only."""
    (fa, a), (fb, b) = losses.items()
    la, lb = label(fa), label(fb)
    if len(a) != len(b):
        return {"name": name, "passed": False if rtol is not None else None,
                "evidence": f"{la} reports {len(a)} losses, {lb} {len(b)}", "numbers": {fa: a, fb: b}}
    rel = relative_diffs(a, b)
    worst = max(range(len(rel)), key=rel.__getitem__)
    finite = bool(np.all(np.isfinite(a)) and np.all(np.isfinite(b)))
    if rtol is None:
        passed, verdict = None, "(informational)"
    else:
        passed = finite and rel[worst] <= rtol
        verdict = f"{'<=' if passed else '>'} {rtol:g}"
    steps = len(a) - 1 if len(a) > STEPS else len(a)
    evidence = (f"loss over {steps} optimizer steps ({setup}): max relative difference {rel[worst]:.2e} {verdict}, "
                f"at {_point(worst, len(a))} ({la} {a[worst]:.9g} vs {lb} {b[worst]:.9g}); "
                f"first {a[0]:.6g} vs {b[0]:.6g}, last {a[-1]:.6g} vs {b[-1]:.6g}")
    return {"name": name, "passed": passed, "evidence": evidence,
            "numbers": {fa: a, fb: b, "relative_difference": rel, "max_relative_difference": rel[worst]}}


def _point(i: int, n: int) -> str:
    return f"batch 1 after step {n - 1}" if n > STEPS and i == n - 1 else f"step {i + 1}"


def compare_after_steps(weights: dict[str, dict[str, np.ndarray]]) -> dict:
    """Informational: how far the weights drifted apart over the steps, worst tensor per role.

    Not a pass/fail check: the declared differences (Adam's epsilon, BatchNorm's unbiased
    running variance in PyTorch) are expected to show here, and are named."""
    a, b = weights.values()
    rows = []
    for name in a:
        if name not in b or a[name].shape != b[name].shape:
            continue
        diff = max_abs_diff(a[name], b[name])
        scale = float(np.max(np.abs(a[name]))) or 1.0
        rows.append((name, diff, diff / scale))
    by_role: dict[str, tuple[str, float, float]] = {}
    for name, diff, rel in rows:
        role = name.split(".", 1)[1]
        if role not in by_role or rel > by_role[role][2]:
            by_role[role] = (name, diff, rel)
    parts = [f"{role}: {n} max |diff| {d:.2e} ({r:.1e} of its largest value)"
             + (" - the declared running-variance difference" if role == "moving_variance" else "")
             for role, (n, d, r) in by_role.items()]
    return {"name": "weights_after_steps", "passed": None,
            "evidence": "informational, after the fp64 steps, worst tensor per role: " + "; ".join(parts),
            "numbers": {n: {"max_abs_diff": d, "relative_to_max": r} for n, d, r in rows}}


def kit_train_losses(backend, batches: list[tuple[object, int]]) -> list[float]:
    """The kit's own fp32 train_step on each (device batch, samples); the mean loss it adds to its sums."""
    backend.set_mode(True)
    backend.take_sums()
    losses = []
    for batch, n in batches:
        backend.train_step(batch)
        loss_sum, _ = backend.take_sums()
        losses.append(loss_sum / n)
    return losses

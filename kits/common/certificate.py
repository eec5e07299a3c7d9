"""The equivalence certificate's framework-free half: canonical names, fixed inputs, weights files, comparisons.

Runs inside each framework's environment (standard library and numpy only) and
on the host, which imports the comparisons from here.

Canonical form (Keras's layout, so that a TensorFlow model needs no conversion):

- parametric layers are numbered per kind in execution order: ``conv 1``,
  ``conv 2``, ..., ``dense 1``, ..., ``batchnorm 1``, ...;
- a parameter's canonical name is ``<kind><index>.<role>``, e.g. ``conv1.kernel``;
- conv kernel HWIO ``(kh, kw, in, out)``; dense kernel ``(in, out)``;
  BatchNorm ``gamma``, ``beta``, ``moving_mean``, ``moving_variance``;
- the rows of a dense kernel fed by a feature map are in NHWC flatten order
  ``(h, w, c)``: each kit follows the reshapes and transposes between the map and
  the product in its trace (kits/common/arithmetic.py), so PyTorch's ``(c, h, w)``
  flatten, a permute before it, or a Keras ``Permute`` all map to the same rows.
"""
from __future__ import annotations

import math
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kits.common import arithmetic, custom, stochastic
from kits.common import data as datalib
from kits.common.files import atomic_file
from kits.common.names import label
from kits.common.spec import RunSpec

if TYPE_CHECKING:
    import numpy.typing as npt

SIDE_SCHEMA = "reprokit.certificate-side/2"
SIDE_NAME = "side.json"                 # with kits.certify --jobs: what each job writes to OUT/<name>/
WEIGHTS_NAME = "initial-weights.npz"    # ... the PyTorch side's initial weights, read by the TensorFlow side
AFTER_NAME = "after-steps.npz"          # ... each side's fp64 weights after the steps
INPUT_NAME = "first-batch.npy"          # a script's certificate: the batch the PyTorch script's model received
LOGITS_SAMPLES = 8          # the fixed batch: the first test samples
STEPS = 10                  # optimizer steps of the loss trajectory (a matrix on a CPU asks for CPU_STEPS
                            # of reprokit/certify/certify_plan.py)
TRACE_BATCH = 2             # samples in the traced forward pass (arithmetic, layers without parameters)
DROPOUT_SAMPLES = 4         # samples, and passes, of the training-mode outputs the dropout check compares
DROPOUT_PASSES = 128        # enough to tell dropout 0.1 from 0.2 at ALPHA (measured on a dense layer's logits)
RANDOM_SPREAD = 1e-5        # outputs whose relative spread over passes is below this are not random
FP32_FLOOR = 2.0 ** -23     # the same-framework baseline is never taken below one float32 rounding
# Same-framework fp64 trajectories from weights one ulp apart, per framework. The horizon is where one of them
# exceeds HORIZON_SHARE of loss_rtol: a chaotic trajectory grows about tenfold per step before it jumps, in
# step with every draw (the same batches drive it), so the cross-framework divergence crosses loss_rtol after
# that point. Measured on ResNet-50 at width 0.125 (quick), 9 draws in PyTorch: each first exceeded 1e-7 at
# step 7, and 1e-6 at steps 7 to 10.
ULP_BASELINES = 1
HORIZON_SHARE = 0.1
# A captured model cannot be rebuilt narrower: its dropout passes are cut to this many forward FLOPs (about
# a minute of a 2-core CPU; seconds of a GPU), never below MIN_PASSES.
PASSES_BUDGET_FLOPS = {"cpu": 1e12, "gpu": 1e14}
MIN_PASSES = 16



class UnmappableModel(Exception):
    """The model has a layer with weights that has no canonical form: it cannot be compared layer by layer."""


class NotCaptured(Exception):
    """The kit cannot capture this framework's model from a script (a limit of the kit, not of the user's model):
    the certificate is not run, with why."""


class WeightsMismatch(Exception):
    """A weights file that does not fit the model (its message is one sentence)."""


class InputError(ValueError):
    """The spec's data cannot give the certificate its fixed batch or its steps (one sentence)."""


class Side:
    """What each framework's certificate side starts from: the kit's own Backend for the spec, built (and
    traced) once, and the optimizer read back from what was built. Subclasses give framework, backend_class,
    _build and _read_optimizer."""
    framework: str
    backend_class: type
    _build: Callable[[], None]
    _read_optimizer: Callable[[], dict[str, Any]]

    def __init__(self, spec: RunSpec, arrays: datalib.Arrays, x_trace: np.ndarray) -> None:
        self.spec = spec
        self.arrays = arrays
        self.who = custom.who(spec, self.framework)
        self.x_trace = x_trace
        self.backend = self.backend_class(spec)
        self.trace = None
        self._build()
        self.optimizer = self._read_optimizer()


def canonical_name(kind: str, index: int, role: str) -> str:
    return f"{kind}{index}.{role}"


def record(kind: str, index: int, role: str, shape: Iterable[Any], native_name: str,
           native_shape: Iterable[Any]) -> dict[str, Any]:
    shape = [int(s) for s in shape]
    return {"layer": f"{kind} {index}", "kind": kind, "index": index, "role": role,
            "name": canonical_name(kind, index, role), "shape": shape, "count": int(math.prod(shape)),
            "native": {"name": native_name, "shape": [int(s) for s in native_shape]}}


def shape_text(shape: Iterable[Any]) -> str:
    return str(tuple(int(s) for s in shape))


# -- the inputs both frameworks see -------------------------------------------------------------

def step_batch_size(spec: RunSpec) -> int:
    """The spec's own batch size, never smaller: BatchNorm's batch statistics depend on it, and at a
    quarter of its batch the quick SimpleCNN's ten-step trajectory became chaotic (a relative
    perturbation of 1e-12 of the initial weights grew to 1.5e-3 within PyTorch alone)."""
    return spec.train.batch_size


def fixed_batch(arrays: datalib.Arrays) -> tuple[np.ndarray, np.ndarray]:
    """The first LOGITS_SAMPLES test samples, uint8 NHWC, as the kit's feeder slices them."""
    n = min(LOGITS_SAMPLES, len(arrays.x_test))
    if n == 0:
        raise InputError("the dataset has no test samples, so the certificate has no fixed batch for its logits")
    return arrays.x_test[:n], arrays.y_test[:n]


def step_batches(spec: RunSpec, arrays: datalib.Arrays, steps: int = STEPS) -> list[tuple[np.ndarray, np.ndarray]]:
    """The first ``steps`` training batches in the order the kit trains on them: epoch 1's order
    (kits.common.data.epoch_order), then epoch 2's where epoch 1 has fewer batches."""
    size = step_batch_size(spec)
    n = len(arrays.x_train)
    if n < size:
        raise InputError(f"the certificate needs training batches of {size} samples but the dataset has "
                         f"{n} training samples")
    out: list[tuple[np.ndarray, np.ndarray]] = []
    epoch = 1
    while len(out) < steps:
        order = datalib.epoch_order(n, spec.train.seed, epoch, spec.data.shuffle)
        for idx in datalib.batches(order, size, True):
            out.append((arrays.x_train[idx], arrays.y_train[idx]))
            if len(out) == steps:
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


def torch_hyperparameters_like_keras(opt: dict[str, Any], t: int) -> dict[str, Any]:
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
        arrays: dict[str, Any] = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()}
        np.savez(fh, **arrays)


def load_weights(path: str | Path, records: list[dict[str, Any]]) -> dict[str, np.ndarray]:
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

def _kinds(records: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for r in records:
        counts[r["kind"]] = max(counts.get(r["kind"], 0), r["index"])
    return ", ".join(f"{n} {k}" for k, n in counts.items()) or "no parametric layers"


def compare_layers(records: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per-layer canonical shapes and counts. passed False with every mismatch named; mapped False
    when the layer lists themselves differ (then no weights can be carried from one to the other)."""
    (fa, ra), (fb, rb) = records.items()
    la, lb = label(fa), label(fb)
    totals = {fa: sum(r["count"] for r in ra), fb: sum(r["count"] for r in rb)}
    names_a, names_b = [r["name"] for r in ra], [r["name"] for r in rb]
    numbers = {"parameters": totals, "tensors": {fa: len(ra), fb: len(rb)}}
    if names_a != names_b:
        i = next((i for i, (x, y) in enumerate(zip(names_a, names_b)) if x != y), min(len(ra), len(rb)))
        at_a = f"{names_a[i]} ({ra[i]['native']['name']})" if i < len(names_a) else "nothing (its list ends)"
        at_b = f"{names_b[i]} ({rb[i]['native']['name']})" if i < len(names_b) else "nothing (its list ends)"
        evidence = (f"not the same model: the layer lists differ ({la}: {_kinds(ra)}; {lb}: {_kinds(rb)}); "
                    f"first difference at parameter {i + 1}: {la} has {at_a}, {lb} has {at_b}; "
                    f"{totals[fa]:,} vs {totals[fb]:,} parameters")
        return {"name": "layers", "passed": False, "mapped": False, "evidence": evidence,
                "mismatches": [evidence], "numbers": numbers}
    mismatches = [f"{x['layer']} {x['role']}: {la} {shape_text(x['shape'])} vs {lb} {shape_text(y['shape'])}"
                  f" ({x['native']['name']}, {y['native']['name']})"
                  for x, y in zip(ra, rb) if x["shape"] != y["shape"]]
    if mismatches:
        evidence = (f"not the same model: {len(mismatches)} parameter shape(s) differ: {'; '.join(mismatches)}; "
                    f"{totals[fa]:,} vs {totals[fb]:,} parameters")
    else:
        evidence = (f"{len(ra)} parameter tensors in {_kinds(ra)} layers match in canonical shape and count "
                    f"({totals[fa]:,} parameters each; NCHW/OIHW mapped to NHWC/HWIO)")
    return {"name": "layers", "passed": not mismatches, "mapped": not mismatches, "evidence": evidence,
            "mismatches": mismatches, "numbers": numbers}


def compare_flops(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The models' arithmetic: every convolution and matrix product at its shape, forward and backward
    (kits/common/arithmetic.py), from each framework's own trace. Passes when the two lists are equal;
    otherwise names the first product that differs."""
    (fa, a), (fb, b) = sides.items()
    la, lb = label(fa), label(fb)
    x, y = a["flops"]["training"], b["flops"]["training"]
    difference = arithmetic.first_arithmetic_difference(a["ops"], b["ops"], la, lb)
    counts = f"{a['flops']['convolutions']} convolutions and {a['flops']['matrix_products']} matrix products"
    if difference is None:
        evidence = (f"the same {counts} at the same shapes, with the same gradients: {x:,.0f} training FLOPs "
                    f"per sample ({a['flops']['forward']:,.0f} forward) in both")
    else:
        evidence = (f"not the same arithmetic: {difference}; {x:,.0f} vs {y:,.0f} training FLOPs per sample "
                    f"(ratio {x / y if y else math.inf:.6f})")
    return {"name": "flops", "passed": difference is None, "evidence": evidence,
            "numbers": {"per_sample": {fa: x, fb: y}, "forward_per_sample": {fa: a["flops"]["forward"],
                                                                             fb: b["flops"]["forward"]},
                        "ratio": x / y if y else math.inf, "how": arithmetic.HOW}}


def compare_structure(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The layers without parameters, as each framework's trace shows them (training mode): activations,
    pooling, padding as applied, the axes of normalisations, dropout rates and masks."""
    (fa, a), (fb, b) = sides.items()
    difference = arithmetic.first_structure_difference(a["ops"], b["ops"], label(fa), label(fb))
    parts = [d for segment in arithmetic.structure(a["ops"]) for d in segment]
    kinds = sorted({d.split(" ")[0] for d in parts})
    evidence = (f"the same {len(parts)} layers without parameters in the same places ({', '.join(kinds) or 'none'})"
                if difference is None else f"a layer without parameters differs: {difference}")
    return {"name": "layers_without_parameters", "passed": difference is None, "evidence": evidence,
            "numbers": {f: arithmetic.structure(s["ops"]) for f, s in sides.items()}}


def max_abs_diff(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def compare_logits(logits: dict[str, dict[str, Any]], rtol: float,
                   samples: str = "the first {n} test samples") -> dict[str, Any]:
    """The same initial weights on the same fixed batch: fp32 in evaluation mode (as the kit runs),
    fp64 in evaluation and in training mode (batch statistics). The largest difference is taken
    relative to the largest |logit|, so the tolerance means the same at any scale."""
    (fa, a), (fb, b) = logits.items()
    la, lb = label(fa), label(fb)
    numbers: dict[str, dict[str, float] | None] = {}
    parts: list[str] = []
    passed, n = True, 0
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
            scale = max(float(np.max(np.abs(xa))), float(np.max(np.abs(xb))), np.finfo(np.float64).tiny)
            rel = diff / scale
            ok = bool(rel <= rtol)
            passed &= ok
            numbers[key] = {"max_abs_diff": diff, "max_abs_logit": scale, "relative": rel}
            parts.append(f"{key} mode max |diff| {diff:.2e} = {rel:.1e} of the largest |logit| {scale:.3g} "
                         f"{'<=' if ok else '>'} {rtol:g}")
    evidence = f"logits of the same initial weights on {samples.format(n=n)}: " + "; ".join(parts)
    return {"name": "logits", "passed": passed, "evidence": evidence, "numbers": numbers}


def compare_dropout(outputs: dict[str, list[Any]], alpha: float = stochastic.ALPHA) -> dict[str, Any]:
    """Training-mode outputs of the same weights over many passes (fresh dropout masks each time).

    Both fixed: no random layer is active in either. One fixed: a random layer is active in one only.
    Both random: an energy-distance permutation test (kits/common/stochastic.py) at false-alarm
    rate ``alpha`` says whether the two frameworks draw from the same distribution."""
    (fa, a), (fb, b) = ((f, np.asarray(v, np.float64)) for f, v in outputs.items())
    la, lb = label(fa), label(fb)
    scale = max(float(np.max(np.abs(a))), float(np.max(np.abs(b))), np.finfo(np.float64).tiny)
    spread = {fa: float(np.mean(np.std(a, axis=0))) / scale, fb: float(np.mean(np.std(b, axis=0))) / scale}
    random = {f: s > RANDOM_SPREAD for f, s in spread.items()}
    numbers = {"passes": {fa: len(a), fb: len(b)}, "relative_spread": spread, "alpha": alpha}
    what = (f"training-mode outputs of the same weights on {a.shape[1]} samples over {len(a)} passes "
            f"(mean standard deviation over passes, relative to the largest |logit|: {la} {spread[fa]:.2e}, "
            f"{lb} {spread[fb]:.2e})")
    if not any(random.values()):
        return {"name": "dropout", "passed": True, "numbers": numbers,
                "evidence": f"{what}: the same on every pass in both, so no dropout or other random layer is active"}
    if not all(random.values()):
        on = la if random[fa] else lb
        off = lb if random[fa] else la
        return {"name": "dropout", "passed": False, "numbers": numbers,
                "evidence": f"{what}: they vary in {on} and not in {off}, so a random layer such as dropout is "
                            f"active in {on} only"}
    if a.shape[1:] != b.shape[1:]:
        return {"name": "dropout", "passed": False, "numbers": numbers,
                "evidence": f"{what}: outputs of different shapes cannot be compared"}
    test = stochastic.energy_test(a, b)
    numbers.update(test)
    passed = test["p_value"] > alpha
    return {"name": "dropout", "passed": passed, "numbers": numbers,
            "evidence": f"{what}: energy-distance permutation test p = {test['p_value']:.4f} "
                        f"{'>' if passed else '<='} {alpha:g} (the false-alarm rate), so the random layers "
                        + ("may be the same" if passed else "differ (rate, kind or place)")}


def relative_diffs(a: list[float], b: list[float]) -> list[float]:
    return [abs(x - y) / max(abs(x), abs(y)) if max(abs(x), abs(y)) > 0 else 0.0 for x, y in zip(a, b)]


def ulp_apart(weights: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """Every weight in float64, moved one float64 ulp up or down (a random direction per element)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, w in weights.items():
        w64 = np.asarray(w, np.float64)
        out[name] = np.nextafter(w64, np.where(rng.random(w64.shape) < 0.5, -np.inf, np.inf))
    return out


def compare_losses(losses: dict[str, list[float]], rtol: float | None, setup: str, steps: int,
                   name: str = "loss_trajectory", baseline: dict[str, list[list[float]]] | None = None
                   ) -> dict[str, Any]:
    """Per-step relative differences of two loss trajectories of ``steps`` steps (one more point: the
    loss of batch 1 after them), each within ``rtol``; rtol None: informational only.

    With ``baseline`` (per framework, the same trajectory from weights one float64 ulp apart, in one or more
    draws), the points are judged up to the horizon where rounding alone still stays within HORIZON_SHARE of
    ``rtol`` in every draw. Past it the trajectory is chaotic (a deep network with BatchNorm in training mode:
    rounding grows by orders of magnitude per step), the same framework parts from itself as far as from the
    other, and those points are shown, not judged. A real difference shows before: at the first loss, or a step."""
    (fa, a), (fb, b) = losses.items()
    la, lb = label(fa), label(fb)
    if len(a) != len(b):
        return {"name": name, "passed": False if rtol is not None else None,
                "evidence": f"{la} reports {len(a)} losses, {lb} {len(b)}", "numbers": {fa: a, fb: b}}
    rel = relative_diffs(a, b)
    base = {fw: [relative_diffs(losses[fw], draw) for draw in draws] for fw, draws in (baseline or {}).items()}
    rounding = [max((d[t] for draws in base.values() for d in draws), default=0.0) for t in range(len(rel))]
    horizon = next((t for t, r in enumerate(rounding) if rtol is not None and not r <= HORIZON_SHARE * rtol),
                   len(rel))
    judged = rel[:max(horizon, 1)]              # the first loss, before any step, is always judged
    worst = max(range(len(judged)), key=judged.__getitem__)
    finite = bool(np.all(np.isfinite(a)) and np.all(np.isfinite(b)))
    if rtol is None:
        passed, verdict = None, "(informational)"
    else:
        passed = finite and judged[worst] <= rtol
        verdict = f"{'<=' if passed else '>'} {rtol:g}"
    evidence = (f"loss over {steps} optimizer steps ({setup}): max relative difference {rel[worst]:.2e} {verdict}, "
                f"at {_point(worst, steps)} ({la} {a[worst]:.9g} vs {lb} {b[worst]:.9g}); "
                f"first {a[0]:.6g} vs {b[0]:.6g}, last {a[-1]:.6g} vs {b[-1]:.6g}")
    if horizon < len(rel):
        evidence += (f"; judged up to {_point(max(horizon, 1) - 1, steps)}: from {_point(horizon, steps)} on, rounding "
                     f"alone parts a framework from itself by more than {HORIZON_SHARE:g} of the tolerance, up to "
                     f"{max(rounding[horizon:]):.1e} (the same steps from weights one float64 ulp apart), so the rest "
                     f"({max(rel[horizon:]):.1e} apart) is shown, not judged")
    numbers: dict[str, Any] = {fa: a, fb: b, "relative_difference": rel, "max_relative_difference": max(judged)}
    if base:
        numbers.update(rounding_baseline=base, judged_points=len(judged))
    return {"name": name, "passed": passed, "evidence": evidence, "numbers": numbers}


def _point(i: int, steps: int) -> str:
    return f"batch 1 after step {steps}" if i == steps else f"step {i + 1}"


def compare_fp32_trajectory(losses: dict[str, dict[str, list[float]]], factor: float) -> dict[str, Any]:
    """The kits' own fp32 steps, gated against what rounding alone does within one framework.

    Per framework and step, two same-framework divergences: the kit's steps with the inputs one float32
    ulp up (``perturbed`` against ``kit``), and the framework's own fp32 rounding, the certificate's
    reference step in fp32 against the same step in fp64 (``reference`` against ``exact``). The second
    is needed: TensorFlow's fp32 gradients of a BatchNorm network are systematically off its fp64 ones
    (up to 6e-2 relative after one step on the tests' SimpleCNN, PyTorch's 4e-5), which an input
    perturbation does not move. The baseline at step t is the largest of these, in either framework,
    at any step up to t, and never below one float32 rounding; the cross-framework divergence of the
    kits' own steps must stay within ``factor`` times it at every step."""
    (fa, a), (fb, b) = losses.items()
    la, lb = label(fa), label(fb)
    cross = relative_diffs(a["kit"], b["kit"])
    base = {f: [max(p, r) for p, r in zip(relative_diffs(s["kit"], s["perturbed"]),
                                          relative_diffs(s["reference"], s["exact"]))] for f, s in losses.items()}
    bound, worst_base, ratios = [], 0.0, []
    for t, c in enumerate(cross):
        worst_base = max(worst_base, base[fa][t], base[fb][t])
        bound.append(factor * max(worst_base, FP32_FLOOR))
        ratios.append(c / bound[-1] if np.isfinite(c) else math.inf)
    worst = max(range(len(ratios)), key=ratios.__getitem__)
    finite = bool(np.all(np.isfinite(a["kit"])) and np.all(np.isfinite(b["kit"])))
    passed = finite and ratios[worst] <= 1.0
    evidence = (f"fp32 loss over {len(cross)} steps of each kit's own train_step: the cross-framework relative "
                f"divergence {'stays within' if passed else 'exceeds'} {factor:g}x the same-framework baseline "
                f"(inputs one float32 ulp up, and each framework's own fp32 rounding against fp64) at every "
                f"step; worst at step {worst + 1}: {cross[worst]:.2e} against a bound of {bound[worst]:.2e} "
                f"({la} {a['kit'][worst]:.7g}, {lb} {b['kit'][worst]:.7g}); baseline at the last step "
                f"{la} {base[fa][-1]:.1e}, {lb} {base[fb][-1]:.1e}")
    return {"name": "loss_trajectory_fp32", "passed": passed, "evidence": evidence,
            "numbers": {fa: a, fb: b, "relative_difference": cross, "baseline": base, "bound": bound,
                        "factor": factor}}


OPTIMIZER_FIELDS = {"sgd": ("lr", "momentum", "nesterov"), "adam": ("lr", "beta1", "beta2", "epsilon")}
OPTIMIZER_DEFAULTS = {"weight_decay": 0.0, "dampening": 0.0, "amsgrad": False}


def compare_optimizer(read_back: dict[str, dict[str, Any]],
                      spec_optimizer: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The optimizer each kit built, read back from the object (before any certificate adjustment),
    against its spec (the name, every spec field, and no weight decay, dampening or AMSGrad) and
    against the other's."""
    problems, parts = [], []
    for fw, got in read_back.items():
        want = spec_optimizer[fw]
        if got.get("name") != want["name"]:
            problems.append(f"{label(fw)} built {got.get('name')!r}, the spec says {want['name']!r}")
            continue
        for key in OPTIMIZER_FIELDS[want["name"]]:
            g, w = got.get(key), want[key]
            same = (g == w) if isinstance(w, bool) else (g is not None and math.isclose(g, w, rel_tol=1e-6))
            if not same:
                problems.append(f"{label(fw)}'s optimizer has {key} {g!r}, its spec {w!r}")
        for key, default in OPTIMIZER_DEFAULTS.items():
            if got.get(key, default) not in (default, None):
                problems.append(f"{label(fw)}'s optimizer has {key} {got[key]!r}, which the spec does not ask for")
        parts.append(f"{label(fw)} {got['class']}("
                     + ", ".join(f"{k}={got[k]!r}" for k in OPTIMIZER_FIELDS[want['name']]) + ")")
    (fa, a), (fb, b) = read_back.items()
    if not problems and a["name"] == b["name"]:
        for key in OPTIMIZER_FIELDS[a["name"]]:
            if not (a[key] == b[key] if isinstance(a[key], bool) else math.isclose(a[key], b[key], rel_tol=1e-6)):
                problems.append(f"{key} is {a[key]!r} in {label(fa)} and {b[key]!r} in {label(fb)}")
    evidence = ("read back from the built optimizers: " + "; ".join(parts)
                + (" - as their specs say" if not problems else f"; {'; '.join(problems)}"))
    return {"name": "optimizer", "passed": not problems, "evidence": evidence, "numbers": read_back}


def compare_read_back_optimizers(read_back: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Two scripts' optimizers, read back from the objects they stepped, against each other (no spec)."""
    (fa, a), (fb, b) = read_back.items()
    parts = [f"{label(f)} {o['class']}("
             + ", ".join(f"{k}={o.get(k)!r}" for k in OPTIMIZER_FIELDS.get(o["name"], ("lr",))) + ")"
             for f, o in read_back.items()]
    if a["name"] != b["name"]:
        problems = [f"{label(fa)} steps with {a['name']}, {label(fb)} with {b['name']}"]
    else:
        problems = [f"{key} is {a.get(key)!r} in {label(fa)} and {b.get(key)!r} in {label(fb)}"
                    for key in OPTIMIZER_FIELDS.get(a["name"], ("lr",))
                    if not (a.get(key) == b.get(key) if isinstance(a.get(key), bool) or a.get(key) is None
                            else math.isclose(a[key], b.get(key) or 0.0, rel_tol=1e-6))]
    for key, default in OPTIMIZER_DEFAULTS.items():
        if (a.get(key) or default) != (b.get(key) or default):
            problems.append(f"{key} is {a.get(key)!r} in {label(fa)} and {b.get(key)!r} in {label(fb)}")
    evidence = "read back from the optimizers the scripts stepped: " + "; ".join(parts) + (
        f"; {'; '.join(problems)}" if problems else " - the same")
    return {"name": "optimizer", "passed": not problems, "evidence": evidence, "numbers": read_back}


def layer_differences(sides: dict[str, dict[str, Any]]) -> list[str]:
    """Every difference between two layer lists in words: layers of each kind, layers one set of weights
    serves at several places, and the parameter totals."""
    (fa, a), (fb, b) = sides.items()
    counts: dict[str, dict[str, int]] = {f: {} for f in sides}
    for f, side in sides.items():
        for r in side["layers"]:
            counts[f][r["kind"]] = max(counts[f].get(r["kind"], 0), r["index"])
    out = [f"{kind} layers: {label(fa)} {counts[fa].get(kind, 0)}, {label(fb)} {counts[fb].get(kind, 0)}"
           for kind in dict.fromkeys([*counts[fa], *counts[fb]]) if counts[fa].get(kind, 0) != counts[fb].get(kind, 0)]
    out += [f"{label(f)} uses one set of weights at several places: {_some(side.get('shared') or [])}"
            for f, side in sides.items() if side.get("shared")]
    totals = {f: sum(r["count"] for r in side["layers"]) for f, side in sides.items()}
    if totals[fa] != totals[fb]:
        out.append(f"parameters: {label(fa)} {totals[fa]:,}, {label(fb)} {totals[fb]:,}")
    return out


def script_outputs(fw: str, outputs: dict[str, Any]) -> str | None:
    """One sentence if a script's model returns what its own loss does not take, or not one row per class."""
    who, layer = outputs["builder"], outputs["last_layer"]
    n, classes = outputs["expected"]
    if len(outputs["shape"]) != 2 or outputs["shape"][1] != classes:
        return (f"{who} returns outputs of shape {shape_text(outputs['shape'])} from its last layer {layer}, but the "
                f"data has {classes} classes: (batch, {classes}) expected")
    if outputs["expects_logits"] and outputs["probabilities"]:
        return (f"{who} returns probabilities (every row of its outputs is non-negative and sums to 1; the last "
                f"layer it calls is {layer}) into a {label(fw)} loss that takes logits")
    if outputs["expects_logits"] is False:
        # PyTorch's nll_loss takes log-probabilities (log_softmax's); Keras's losses without from_logits take
        # probabilities
        takes = "log_probabilities" if fw == "pytorch" else "probabilities"
        if not outputs.get(takes):
            given = "probabilities" if outputs["probabilities"] else "log-probabilities" if outputs.get(
                "log_probabilities") else "logits"
            return (f"{who} returns {given} (the last layer it calls is {layer}) into a {label(fw)} loss that takes "
                    f"{takes.replace('_', '-')}")
    return None


def as_probabilities(rows: npt.ArrayLike) -> np.ndarray:
    """Softmax of logits, row by row (float64)."""
    x = np.asarray(rows, np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    out: np.ndarray = e / e.sum(axis=-1, keepdims=True)
    return out


def check_outputs(fw: str, outputs: dict[str, Any]) -> str | None:
    """One sentence if the model's outputs are not what the kit's loss takes: (batch, classes) logits."""
    who, layer = outputs["builder"], outputs["last_layer"]
    if list(outputs["shape"]) != list(outputs["expected"]):
        return (f"{who} returns outputs of shape {shape_text(outputs['shape'])} from its last layer {layer}; "
                f"the experiment has {outputs['expected'][1]} classes, so it must return (batch, "
                f"{outputs['expected'][1]}) logits")
    if outputs["expects_logits"] and outputs["probabilities"]:
        return (f"{who} returns probabilities, not logits: its last layer {layer} makes every row non-negative "
                f"and sum to 1, and the {label(fw)} kit's loss takes logits")
    return None


def compare_after_steps(weights: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
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


def kit_train_losses(backend: Any, batches: list[tuple[object, int]],
                     before_step: Callable[[int], object] | None = None) -> list[float]:
    """The kit's own fp32 train_step on each (device batch, samples); the mean loss it adds to its sums.
    ``before_step(t)`` runs before step t (1-based)."""
    backend.set_mode(True)
    backend.take_sums()
    losses = []
    for t, (batch, n) in enumerate(batches, 1):
        if before_step:
            before_step(t)
        backend.train_step(batch)
        loss_sum, _ = backend.take_sums()
        losses.append(loss_sum / n)
    return losses

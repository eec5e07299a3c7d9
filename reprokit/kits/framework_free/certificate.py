"""The equivalence certificate's framework-free half: canonical names, fixed inputs, weights files, the kit's steps.

Runs inside each framework's environment (standard library and numpy only) and
on the host. What the host judges of two sides is next to it: the same model
(reprokit/kits/framework_free/model_checks.py) and the same numbers (reprokit/kits/framework_free/numeric_checks.py).

Canonical form (Keras's layout, so that a TensorFlow model needs no conversion):

- parametric layers are numbered per kind in execution order: ``conv 1``,
  ``conv 2``, ..., ``dense 1``, ..., ``batchnorm 1``, ...;
- a parameter's canonical name is ``<kind><index>.<role>``, e.g. ``conv1.kernel``;
- conv kernel HWIO ``(kh, kw, in, out)``; dense kernel ``(in, out)``;
  BatchNorm ``gamma``, ``beta``, ``moving_mean``, ``moving_variance``;
- the rows of a dense kernel fed by a feature map are in NHWC flatten order
  ``(h, w, c)``: each kit follows the reshapes and transposes between the map and
  the product in its trace (reprokit/kits/framework_free/arithmetic.py), so PyTorch's ``(c, h, w)``
  flatten, a permute before it, or a Keras ``Permute`` all map to the same rows.
"""
from __future__ import annotations

import math
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from reprokit.kits.contract.files import atomic_file
from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free import custom
from reprokit.kits.framework_free import data as datalib

SIDE_SCHEMA = "reprokit.certificate-side/2"
SIDE_NAME = "side.json"                 # with reprokit.kits.certify --jobs: what each job writes to OUT/<name>/
WEIGHTS_NAME = "initial-weights.npz"    # ... the PyTorch side's initial weights, read by the TensorFlow side
AFTER_NAME = "after-steps.npz"          # ... each side's fp64 weights after the steps
INPUT_NAME = "first-batch.npy"          # a script's certificate: the batch the PyTorch script's model received
EVIDENCE_FOLDER = "evidence"            # ... and each process's evidence at its first step (reprokit/kits/ranks/)
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
    (reprokit.kits.framework_free.data.epoch_order), then epoch 2's where epoch 1 has fewer batches."""
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
        problems.append(f"it lacks {first_few(missing)}")
    if extra:
        problems.append(f"it has {first_few(extra)} which the model does not")
    if wrong:
        problems.append(first_few(wrong))
    if problems:
        raise WeightsMismatch(f"the weights file {path} does not match the model "
                              f"({len(expected)} canonical parameters): {'; '.join(problems)}")
    bad = [n for n, a in weights.items() if not np.issubdtype(a.dtype, np.floating) or not np.isfinite(a).all()]
    if bad:
        raise WeightsMismatch(f"the weights file {path} has non-float or non-finite values in {first_few(bad)}")
    return {n: weights[n].astype(np.float32) for n in expected}


def first_few(items: list[str], k: int = 3) -> str:
    """The first ``k`` items, and how many more there are: a refusal names a few, not hundreds."""
    return ", ".join(items[:k]) + (f" and {len(items) - k} more" if len(items) > k else "")


def ulp_apart(weights: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """Every weight in float64, moved one float64 ulp up or down (a random direction per element)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, w in weights.items():
        w64 = np.asarray(w, np.float64)
        out[name] = np.nextafter(w64, np.where(rng.random(w64.shape) < 0.5, -np.inf, np.inf))
    return out


# -- the kit's own steps ------------------------------------------------------------------------

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

"""The generated stand-ins of the datasets the kit knows by name: noisy gratings a small CNN learns.

Runs on the host (reprokit/environments/datasets.py writes a plan's stand-in as an .npz) and in a probed
script's run (a stand-in the plan did not prepare, for a script that loads a second dataset): numpy only,
and the same bytes for the same (dataset, counts, seed) wherever it runs.

Each has its dataset's shapes: CIFAR-10 32x32x3 with 10 classes, MNIST and Fashion-MNIST 28x28 grayscale
with 10, CIFAR-100 32x32x3 with 100 fine labels in 20 coarse ones (coarse = fine // 5).
"""
from __future__ import annotations

import numpy as np

# Class c is a grating at an orientation its class sets (a grating at t and t + 180 degrees is the same),
# whose per-channel contrast follows a hue that turns with c: CIFAR-10's ten classes at 18-degree steps,
# each its own hue; CIFAR-100's twenty coarse classes at 9-degree steps, five hues for the fine ones within.
_FREQUENCY_BAND = (0.08, 0.2)   # cycles per pixel: periods of 5 to 12 pixels
_AMPLITUDE = 60.0
_NOISE_STD = 30.0
_TINT_JITTER = 0.1
CIFAR100_FINE_PER_COARSE = 5


def _hues(n: int) -> np.ndarray:
    return 0.75 + 0.25 * np.cos(2 * np.pi * (np.arange(n)[:, None] / n + np.arange(3)[None, :] / 3))


# (side, classes, classes per orientation, hues (None: grayscale), its own stream beside the seed)
_SHAPES = {"cifar10": (32, 10, 1, _hues(10), None), "cifar100": (32, 100, CIFAR100_FINE_PER_COARSE, _hues(5), 3),
           "mnist": (28, 10, 1, None, 1), "fashion_mnist": (28, 10, 1, None, 2)}
NAMES = tuple(_SHAPES)


def generate(name: str, n_train: int, n_test: int,
             seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test) of the named dataset's stand-in: uint8 NHWC (NHW for grayscale) and
    int64 labels, balanced. One stream, train drawn first: the test set is independent of the train set yet fixed
    by (n_train, n_test, seed). Each dataset has its own stream (CIFAR-10's is the seed's alone, as it was first)."""
    side, classes, per_orientation, hues, stream = _SHAPES[name]
    rng = np.random.default_rng(seed if stream is None else (seed, stream))
    shape = (side, classes, per_orientation, hues)
    return (*gratings(n_train, rng, *shape), *gratings(n_test, rng, *shape))


def gratings(n: int, rng: np.random.Generator, side: int = 32, classes: int = 10, per_orientation: int = 1,
             hues: np.ndarray | None = _SHAPES["cifar10"][3]) -> tuple[np.ndarray, np.ndarray]:
    """Noisy gratings, tinted where the images have colour, a small CNN learns in a few CPU epochs.

    Random phase, frequency, tint jitter and pixel noise keep it from being a lookup: on CIFAR-10's, colour
    contrast alone gets about two in three right, orientation the rest, and no single pixel says anything (the
    phase is random). Grayscale ones have orientation alone.
    """
    labels = rng.permutation(np.arange(n) % classes)  # balanced, in random order
    # float32 throughout: half the memory traffic of float64, which dominates the cost.
    step = 180.0 / (classes // per_orientation)
    theta = np.deg2rad((labels // per_orientation) * step).astype(np.float32)
    frequency = rng.uniform(*_FREQUENCY_BAND, n).astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, n).astype(np.float32)
    rows, cols = np.mgrid[0:side, 0:side].astype(np.float32)
    along = np.cos(theta)[:, None, None] * cols + np.sin(theta)[:, None, None] * rows
    grating = np.sin(np.float32(2 * np.pi) * frequency[:, None, None] * along + phase[:, None, None])
    if hues is None:
        noise = rng.standard_normal((n, side, side), dtype=np.float32)
        image = 127.5 + _AMPLITUDE * grating + _NOISE_STD * noise
    else:
        tint = (hues[labels % len(hues)] + _TINT_JITTER * rng.standard_normal((n, 3))).astype(np.float32)
        noise = rng.standard_normal((n, side, side, 3), dtype=np.float32)
        image = 127.5 + _AMPLITUDE * grating[..., None] * tint[:, None, None, :] + _NOISE_STD * noise
    return np.clip(np.rint(image), 0, 255).astype(np.uint8), labels.astype(np.int64)

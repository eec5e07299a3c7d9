"""Do two frameworks' random layers draw from the same distribution? A two-sample test on outputs.

Each framework runs the same weights on the same inputs in training mode many times; each pass
draws fresh dropout masks, so each pass is one independent draw of the output vector. The two
sets of draws are compared with the energy distance (Szekely and Rizzo) and a permutation test:
the p-value is (1 + #{permuted statistics >= observed}) / (1 + permutations), with the labels
permuted by a seeded generator. Under the null hypothesis (both sets are independent draws from
one distribution) such a p-value satisfies P(p <= alpha) <= alpha, whatever the distribution:
the test's false-alarm rate is at most ALPHA.
"""
from __future__ import annotations

from typing import Any

import numpy as np

ALPHA = 1e-3            # false-alarm rate of the dropout check
PERMUTATIONS = 1999     # with ALPHA = 1e-3: reject when at most one permutation reaches the observed value
SEED = 0


def energy_statistic(distances: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """2 E|X - Y| - E|X - X'| - E|Y - Y'| for each row of boolean ``labels`` (True: first sample)."""
    first = labels.astype(np.float64)
    second = 1.0 - first
    n1, n2 = first.sum(axis=1), second.sum(axis=1)
    d_first = first @ distances           # row i: sum over j of d(i, j) for j in the first sample
    within_1 = np.einsum("pi,pi->p", d_first, first)
    between = np.einsum("pi,pi->p", d_first, second)
    within_2 = np.einsum("pi,pi->p", second @ distances, second)
    statistic: np.ndarray = 2 * between / (n1 * n2) - within_1 / n1**2 - within_2 / n2**2
    return statistic


def energy_test(a: np.ndarray, b: np.ndarray, permutations: int = PERMUTATIONS, seed: int = SEED) -> dict[str, Any]:
    """Permutation test of "a and b are draws from one distribution"; rows are draws."""
    a = np.asarray(a, np.float64).reshape(len(a), -1)
    b = np.asarray(b, np.float64).reshape(len(b), -1)
    pooled = np.vstack([a, b])
    distances = np.sqrt(np.maximum(((pooled[:, None, :] - pooled[None, :, :]) ** 2).sum(-1), 0.0))
    observed_labels = np.arange(len(pooled)) < len(a)
    observed = float(energy_statistic(distances, observed_labels[None, :])[0])
    rng = np.random.default_rng(seed)
    permuted = np.array([rng.permutation(observed_labels) for _ in range(permutations)])
    stats = energy_statistic(distances, permuted)
    exceed = int(np.sum(stats >= observed * (1 - 1e-12)))
    return {"statistic": observed, "p_value": (1 + exceed) / (1 + permutations), "permutations": permutations,
            "draws": [len(a), len(b)]}

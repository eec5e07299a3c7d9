"""The certificate's comparisons of the numbers two sides' models compute from the same weights.

Logits on the fixed batch (a script's as probabilities where its loss takes them), training-mode outputs
over many dropout passes, loss trajectories (fp64 against a same-framework rounding baseline, and the
kits' own fp32 steps), and the weights after the steps. Framework-free (standard library and numpy), used
by the host; whether the two models are the same model at all is reprokit/kits/framework_free/model_checks.py.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from reprokit.kits.contract.names import label
from reprokit.kits.framework_free import stochastic
from reprokit.kits.framework_free.certificate import FP32_FLOOR, HORIZON_SHARE, RANDOM_SPREAD, shape_text

if TYPE_CHECKING:
    import numpy.typing as npt


# -- comparisons (used by the host) ------------------------------------------------------------

def max_abs_diff(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def as_probabilities(rows: npt.ArrayLike) -> np.ndarray:
    """Softmax of logits, row by row (float64)."""
    x = np.asarray(rows, np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    out: np.ndarray = e / e.sum(axis=-1, keepdims=True)
    return out


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
    Both random: an energy-distance permutation test (reprokit/kits/framework_free/stochastic.py) at false-alarm
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

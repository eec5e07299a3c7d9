"""Where two models part: the first layer whose output differs, both frameworks' settings of it, and the first
gradient that parts in the fp64 steps (numpy and the standard library only: runs in each kit and on the host).

Each side records every layer's output in call order, on the first RECORD_SAMPLES samples of the fixed batch,
in evaluation mode with dropout off (fp64 for the kit's models and user builders; fp32 for models captured from
scripts, which cannot be rebuilt), in canonical layout (NHWC; a flatten of a channels-first map in (h, w, c)
order), with the layer's name, class, family and settings read from the built object. A layer with a fused
activation (Keras's ``Conv2D(activation="relu")``) is recorded as two entries, the product and the activation,
as PyTorch's separate modules are. The arrays go to an .npz beside side.json, at most MAX_ELEMENTS per layer:
the same evenly spaced elements on both sides, since canonical shapes agree.

The host aligns the two lists by order, family, shape and agreement, not by index (a function such as F.relu
has no module and so no entry): the longest chain of pairs of the same shape that agree within a tolerance
relative to their scale (max |a - b| / max |a|, |b|). The first layers after the chain's end are where the two
part; a layer of its own kind on one side only, before the next pair of the same family, is named as the place
they part, which the other lacks.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from reprokit.kits.contract.files import atomic_file
from reprokit.kits.contract.names import label

OUTPUTS_NAME = "layer-outputs.npz"      # beside side.json: every layer's output, subsampled
GRADIENTS_NAME = "gradients.npz"        # ... each fp64 reference step's canonical gradients, subsampled
RECORD_SAMPLES = 2
MAX_ELEMENTS = 65536
MAX_GRADIENT_ELEMENTS = 4096
# Families a framework may apply as a function with no layer object (F.relu, x.flatten(1)): one side may
# have no entry for them, which is not a layer it lacks.
FUNCTIONAL = {"activation", "pool", "flatten", "reshape", "dropout", "pad", "identity"}


def subsample(a: Any, limit: int) -> np.ndarray:
    """The array flattened, cut to ``limit`` evenly spaced elements: the same ones for any array of its size."""
    flat = np.asarray(a, np.float64).reshape(-1)
    if flat.size <= limit:
        return flat
    out: np.ndarray = flat[np.linspace(0, flat.size - 1, limit).astype(np.int64)]
    return out


def entry(name: str, kind: str, family: str, settings: dict[str, Any], shape: Sequence[int]) -> dict[str, Any]:
    """What a side says of one layer's output (its values go to the .npz)."""
    return {"name": name, "kind": kind, "family": family, "settings": settings, "shape": [int(s) for s in shape]}


def save_outputs(folder: Path, modes: dict[str, list[tuple[dict[str, Any], np.ndarray]]]) -> dict[str, Any]:
    """Each mode's entries, in call order, with their subsampled values in folder/OUTPUTS_NAME (key
    '<mode>:<index>'); returns the entries by mode."""
    arrays: dict[str, Any] = {f"{mode}:{i}": subsample(a, MAX_ELEMENTS) for mode, outputs in modes.items()
                              for i, (_, a) in enumerate(outputs)}
    with atomic_file(folder / OUTPUTS_NAME, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    return {mode: [e for e, _ in outputs] for mode, outputs in modes.items()}


def save_gradients(folder: Path, steps: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """Each step's canonical gradients, subsampled, in folder/GRADIENTS_NAME."""
    arrays: dict[str, Any] = {f"{t}:{name}": subsample(g, MAX_GRADIENT_ELEMENTS) for t, grads in enumerate(steps, 1)
              for name, g in grads.items()}
    with atomic_file(folder / GRADIENTS_NAME, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    return {"steps": len(steps), "file": GRADIENTS_NAME, "elements_per_tensor": MAX_GRADIENT_ELEMENTS}


def load(path: Path) -> dict[str, np.ndarray] | None:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError):
        return None


def relative(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| relative to the larger of the two's largest |value| (0 where both are zero)."""
    scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)))
    diff = float(np.max(np.abs(a - b), initial=0.0))
    if not math.isfinite(diff):
        return math.inf
    return diff / scale if scale > 0 else 0.0


# -- the first layer that parts -------------------------------------------------------------------------

def _chain(a: list[dict[str, Any]], xa: list[np.ndarray], b: list[dict[str, Any]], xb: list[np.ndarray],
           rtol: float) -> list[tuple[int, int]]:
    """The longest chain of pairs, in order on both sides, of the same shape whose outputs agree."""
    n, m = len(a), len(b)
    agree = [[a[i]["shape"] == b[j]["shape"] and relative(xa[i], xb[j]) <= rtol for j in range(m)] for i in range(n)]
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            best[i][j] = max(best[i + 1][j], best[i][j + 1], best[i + 1][j + 1] + 1 if agree[i][j] else 0)
    out, i, j = [], 0, 0
    while i < n and j < m:
        if agree[i][j] and best[i][j] == best[i + 1][j + 1] + 1:
            out.append((i, j))
            i, j = i + 1, j + 1
        elif best[i + 1][j] >= best[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


def first_parting(a: list[dict[str, Any]], xa: list[np.ndarray], b: list[dict[str, Any]], xb: list[np.ndarray],
                  rtol: float) -> dict[str, Any] | None:
    """Where the two output lists part, or None where the last outputs agree: {"after": (i, j) of the last
    agreeing pair or None, "a", "b": the indices named (None: that side lacks the layer), "relative"}."""
    chain = _chain(a, xa, b, xb, rtol)
    if (chain and chain[-1] == (len(a) - 1, len(b) - 1)) or not (a or b):
        return None
    i0, j0 = (chain[-1][0] + 1, chain[-1][1] + 1) if chain else (0, 0)
    after = chain[-1] if chain else None
    pairs = [(p, q) for p in range(i0, len(a)) for q in range(j0, len(b)) if a[p]["family"] == b[q]["family"]]
    p, q = min(pairs, key=lambda pq: (pq[0] - i0 + pq[1] - j0, pq[0])) if pairs else (len(a), len(b))
    # A layer of its own kind before the next pair of one family (or with none after it): the other lacks it.
    own_a = next((k for k in range(i0, p) if a[k]["family"] not in FUNCTIONAL), None)
    own_b = next((k for k in range(j0, q) if b[k]["family"] not in FUNCTIONAL), None)
    if own_a is not None or own_b is not None or not pairs:
        if own_a is None and own_b is None:         # nothing pairs after the chain: the first left on either side
            own_a, own_b = (i0 if i0 < len(a) else None), (j0 if j0 < len(b) else None)
            if own_a is not None and own_b is not None:
                return {"after": after, "a": own_a, "b": own_b, "relative": None, "skipped": ([], [])}
        if own_a is not None and (own_b is None or own_a - i0 <= own_b - j0):
            return {"after": after, "a": own_a, "b": None, "relative": None, "skipped": ([], [])}
        return {"after": after, "a": None, "b": own_b, "relative": None, "skipped": ([], [])}
    rel = relative(xa[p], xb[q]) if a[p]["shape"] == b[q]["shape"] else None
    return {"after": after, "a": p, "b": q, "relative": rel, "skipped": (list(range(i0, p)), list(range(j0, q)))}


def _value(v: Any) -> str:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return str(v)
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_value(x) for x in v) + ")"
    return str(v)


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, bool) or isinstance(y, bool) or not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
        if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
            return len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y))
        return bool(x == y)
    return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-12)


def setting_differences(sa: dict[str, Any], sb: dict[str, Any]) -> list[str]:
    """Each setting whose canonical values differ, as 'name A vs B' ('(none)' where one side has no such
    setting)."""
    return [f"{k} {_value(sa.get(k, '(none)'))} vs {_value(sb.get(k, '(none)'))}"
            for k in dict.fromkeys([*sa, *sb]) if k not in sa or k not in sb or not _same(sa[k], sb[k])]


def _layer(e: dict[str, Any]) -> str:
    return f"{e['name']} ({e['kind']})"


def parting_message(fa: str, a: list[dict[str, Any]], fb: str, b: list[dict[str, Any]],
                    found: dict[str, Any], precision: str) -> tuple[str, dict[str, Any]]:
    """One line naming where the two part, and its numbers (both layers' settings, what differs)."""
    la, lb = label(fa), label(fb)
    ea = a[found["a"]] if found["a"] is not None else None
    eb = b[found["b"]] if found["b"] is not None else None
    before = (f"; the outputs agree through {la} {_layer(a[found['after'][0]])} / {lb} {_layer(b[found['after'][1]])}"
              if found["after"] else "; no layer's output agrees")
    numbers: dict[str, Any] = {fa: ea, fb: eb, "relative": found["relative"], "precision": precision}
    if ea is None or eb is None:
        has, lacks, e = (la, lb, ea) if ea is not None else (lb, la, eb)
        assert e is not None
        numbers["lacks"] = fb if ea is not None else fa
        return f"first parts at {has} {_layer(e)}, a layer {lacks} lacks{before}", numbers
    differs = setting_differences(ea["settings"], eb["settings"])
    numbers["differs"] = differs
    how = (f"output differs {found['relative']:.1e} of its scale" if found["relative"] is not None
           else f"output shapes {tuple(ea['shape'])} vs {tuple(eb['shape'])}")
    skipped = [f"{lbl} {_layer(rows[k])}" for lbl, rows, ks in ((la, a, found["skipped"][0]),
                                                                (lb, b, found["skipped"][1])) for k in ks]
    note = (f" (after {', '.join(skipped[:2])}{' ...' if len(skipped) > 2 else ''}, with no counterpart)"
            if skipped else "")
    settings = f"settings that differ: {'; '.join(differs)}" if differs else "no setting differs"
    return f"first parts at {la} {_layer(ea)} / {lb} {_layer(eb)}: {how}{note}; {settings}", numbers


def compare_outputs(sides: dict[str, dict[str, Any]], arrays: dict[str, dict[str, np.ndarray]],
                    rtol: float) -> dict[str, Any]:
    """The check naming the first layer that parts (informational: the failing checks say that they part): in
    evaluation mode, or, where every output agrees there, in training mode (batch statistics; dropout off)."""
    (fa, sa), (fb, sb) = sides.items()
    precision = sa["layer_outputs"]["precision"]
    for mode in ("eval", "train"):
        a, b = sa["layer_outputs"]["modes"][mode], sb["layer_outputs"]["modes"][mode]
        xa = [arrays[fa][f"{mode}:{i}"] for i in range(len(a))]
        xb = [arrays[fb][f"{mode}:{i}"] for i in range(len(b))]
        found = first_parting(a, xa, b, xb, rtol)
        if found is not None:
            message, numbers = parting_message(fa, a, fb, b, found, precision)
            numbers["mode"] = mode
            message += " (in training mode: the evaluation-mode outputs agree)" if mode == "train" else ""
            return {"name": "first_parting_layer", "passed": None, "evidence": message, "numbers": numbers,
                    "tolerance": rtol}
    return {"name": "first_parting_layer", "passed": None, "tolerance": rtol,
            "evidence": f"no layer parts: every layer's output ({precision}, dropout off) agrees within {rtol:g} of "
                        f"its scale, in evaluation and in training mode"}


NORMALISATIONS = ("batchnorm",)      # families whose settings only a long run shows (the running statistics' momentum)


def compare_normalisations(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every normalisation layer's settings, in order, read from both built objects: epsilon, the momentum of its
    running statistics (canonical: the new batch's weight, so Keras's 0.9 is PyTorch's 0.1), its axes. The
    momentum changes no training step and no output from the initial weights, only what evaluation sees after
    training: this check is where the certificate sees it."""
    (fa, sa), (fb, sb) = sides.items()
    la, lb = label(fa), label(fb)
    name = "normalisation_settings"
    if any("layer_settings" not in s for s in (sa, sb)):
        why = "; ".join(s.get("layer_settings_error", f"{label(fw)} recorded none") for fw, s in sides.items()
                        if "layer_settings" not in s)
        return {"name": name, "passed": None, "evidence": f"not known: {why}"}
    a, b = ([e for e in s["layer_settings"] if e["family"] in NORMALISATIONS] for s in (sa, sb))
    if len(a) != len(b):
        return {"name": name, "passed": False,
                "evidence": f"{la} has {len(a)} normalisation layers, {lb} {len(b)}"}
    for i, (ea, eb) in enumerate(zip(a, b), 1):
        differs = setting_differences(ea["settings"], eb["settings"])
        if differs:
            return {"name": name, "passed": False,
                    "evidence": f"normalisation layer {i} of {len(a)}, {la} {_layer(ea)} / {lb} {_layer(eb)}: "
                                f"{'; '.join(differs)}", "numbers": {fa: ea["settings"], fb: eb["settings"]}}
    shown = "; ".join(f"{k} {_value(v)}" for k, v in (a[0]["settings"] if a else {}).items()
                      if k in ("epsilon", "momentum"))
    return {"name": name, "passed": True,
            "evidence": f"the same settings in all {len(a)} normalisation layers" + (f" ({shown} in the first)"
                                                                                     if shown else "")}


# -- the first gradient that parts ----------------------------------------------------------------------

def compare_gradients(sides: dict[str, dict[str, Any]], arrays: dict[str, dict[str, np.ndarray]],
                      records: list[dict[str, Any]], losses: dict[str, list[float]], loss_rtol: float,
                      rtol: float) -> dict[str, Any]:
    """The first step whose fp64 loss parts, and the first step and tensor whose gradient parts, in backward
    order (the last layer's gradient is computed first)."""
    (fa, a), (fb, b) = losses.items()
    steps = min(sides[fa]["gradients"]["steps"], sides[fb]["gradients"]["steps"])
    rel_loss = [abs(x - y) / max(abs(x), abs(y)) if max(abs(x), abs(y)) > 0 else 0.0 for x, y in zip(a, b)]
    loss_step = next((t + 1 for t, r in enumerate(rel_loss[:steps]) if not r <= loss_rtol), None)
    names = [r["name"] for r in reversed(records)]
    for t in range(1, steps + 1):
        for name in names:
            ga, gb = arrays[fa].get(f"{t}:{name}"), arrays[fb].get(f"{t}:{name}")
            if ga is None or gb is None or ga.shape != gb.shape:
                continue
            rel = relative(ga, gb)
            if rel > rtol:
                native = {f: next((r["native"]["name"] for r in s["layers"] if r["name"] == name), "?")
                          for f, s in sides.items()}
                loss = (f"the fp64 losses part at step {loss_step} ({rel_loss[loss_step - 1]:.1e} apart)"
                        if loss_step else f"the fp64 losses agree within {loss_rtol:g} over {steps} steps")
                update = (f"; every gradient agrees through step {t - 1}, so the update of step {t - 1} parts "
                          f"(optimizer or its state)" if t > 1 else "")
                evidence = (f"{loss}; the gradients first part at step {t}, first in backward order at {name} "
                            f"({label(fa)} {native[fa]} / {label(fb)} {native[fb]}): {rel:.1e} of its scale{update}")
                return {"name": "first_parting_gradient", "passed": None, "evidence": evidence, "tolerance": rtol,
                        "numbers": {"loss_step": loss_step, "step": t, "tensor": name, "native": native,
                                    "relative": rel}}
    return {"name": "first_parting_gradient", "passed": None, "tolerance": rtol,
            "evidence": (f"every gradient agrees within {rtol:g} of its scale over {steps} fp64 steps"
                         + (f"; the fp64 losses part at step {loss_step}" if loss_step else "")),
            "numbers": {"loss_step": loss_step, "step": None}}

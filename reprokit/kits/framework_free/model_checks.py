"""The certificate's comparisons of what two sides' models are: the same model, or where they part.

Layer by layer in canonical form, the arithmetic and the layers without parameters of each framework's
trace, the optimizers read back, and whether each model returns what its loss takes. Framework-free, like
reprokit/kits/framework_free/certificate.py: the host judges two sides with them, and a kit refuses a model whose
outputs its loss cannot take (check_outputs) before its costly passes. The numbers the same models compute are
compared in reprokit/kits/framework_free/numeric_checks.py.
"""
from __future__ import annotations

import math
from typing import Any

from reprokit.kits.contract.names import label
from reprokit.kits.framework_free import arithmetic
from reprokit.kits.framework_free.certificate import first_few, shape_text

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
    (reprokit/kits/framework_free/arithmetic.py), from each framework's own trace. Passes when the two lists are equal;
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
    out += [f"{label(f)} uses one set of weights at several places: {first_few(side.get('shared') or [])}"
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

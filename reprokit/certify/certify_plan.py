"""Which equivalence certificates a matrix needs: one per variant pair that runs, on the timed specs.

A pair is the spec of the reference framework (the registry's first, PyTorch) and one other framework's
(TensorFlow), of one variant, at repeat 0: one pair per other framework the experiment runs. A variant that
only one framework has (an ablation's ``+pitfall`` or ``-pitfall``) is paired with the other framework's spec
of the same configuration, which is what the report holds it against: ``fixed`` for a ``+pitfall``,
``as_posted`` for a ``-pitfall`` (reprokit/results/runs.py stand_in). A pair that cannot be certified (one
framework only, or a kit without a certificate side) is recorded as not run, with the reason, so the report
names it instead of leaving it out.

Certificates are cached by what they certify: the model, the data (its checksum) and its
preprocessing, the optimizer and loss, the numerics, the pitfalls that touch
those parts, the environment (lock or image), the code that makes and judges them (the kits'
and this package's, by content: not the commit), the trajectory budget, which
decides the width the costly checks ran at, and the steps they ran. An ablation of
many variants that share a model therefore certifies it once, and a second state folder of the
same matrix reuses it (reprokit/certify/certify_runs.py).
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from reprokit.kits.contract.names import FRAMEWORKS, REFERENCE, REGISTRY, label, others
from reprokit.kits.contract.pitfalls import certified
from reprokit.kits.framework_free import certificate as cert
from reprokit.plan import model_cost
from reprokit.results import runs, utilisation
from reprokit.results.provenance import sha256_file, tree_sha256

FIXED = "fixed"
# Spec fields that do not change what the certificate checks: how long and how it is measured.
UNCERTIFIED_TRAIN = ("epochs", "max_steps_per_epoch", "warmup_steps", "target_accuracy", "eval_batch_size")


def pairs(specs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """experiment -> [{"pytorch": spec, "tensorflow": spec} or a not-run record], one per variant and other
    framework (each pair's keys: the reference, then the other)."""
    by: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    scripts: dict[tuple[str, str, int], dict[str, Any]] = {}
    for s in specs:
        if s.get("source") == "script":
            if s["repeat"] == 0:       # a sweep's scripts are paired at each device count
                scripts.setdefault((s["experiment"], s["variant"], s.get("devices", 1)), {})[s["framework"]] = s
            continue
        if s["repeat"] == 0:
            # The kit's certificate is of its model, data and step, the same at every count: made at one device,
            # from a sweep's first count. What N adds each run shows at its first step (report/certified_at_n.py).
            one = {k: v for k, v in s.items() if k != "devices"}
            by.setdefault(s["experiment"], {}).setdefault(s["variant"], {}).setdefault(s["framework"], one)
    out: dict[str, list[dict[str, Any]]] = {}
    for experiment, variants in by.items():
        # a tuned setting alone is one part of tuned, whose pair is certified
        certified_here = [v for v in variants if not v.startswith(runs.TUNED_ALONE)]
        for variant in sorted(certified_here, key=lambda v: (v != FIXED, v)):
            for fws in _pairs({fw for v in variants.values() for fw in v}):
                if not any(fw in variants[variant] for fw in fws):
                    continue                    # a variant of a third framework only: not this pair's
                pair = {fw: _stand_in(variants, variant, fw) for fw in fws}
                missing = [fw for fw in fws if pair[fw] is None]
                if missing:
                    there = next(s for s in pair.values() if s)
                    out.setdefault(experiment, []).append(not_run(
                        {fw: s for fw, s in pair.items() if s},
                        f"only {label(there['framework'])} runs variant {variant!r} in this matrix, so there is no "
                        f"{label(missing[0])} run to hold it against", experiment, variant, fws))
                else:
                    out.setdefault(experiment, []).append(_certifiable(pair, experiment, variant))
    for (experiment, variant, _), found in scripts.items():
        for fws in _pairs(set(found)):
            pair = {fw: found[fw] for fw in fws if fw in found}     # the reference first
            missing = [fw for fw in fws if fw not in found]
            if missing:
                pair = not_run(pair, f"the experiment has no {label(missing[0])} script to hold it against",
                               experiment, variant, fws)
            out.setdefault(experiment, []).append(pair)
    return out


def _stand_in(variants: dict[str, dict[str, dict[str, Any]]], variant: str, fw: str) -> dict[str, Any] | None:
    """The spec of ``fw`` that runs ``variant``: its own, or the one of the same configuration under another name."""
    found = runs.stand_in(variant, fw, variants, lambda spec: spec)
    return variants[found][fw] if found else None


def _pairs(present: set[str]) -> list[tuple[str, str]]:
    """The framework pairs of an experiment's specs: the reference with each other framework that runs it (the
    registry's second where none does, so that a lone reference is named as unpaired)."""
    return [(REFERENCE, other) for other in others(present)]


def _certifiable(pair: dict[str, Any], experiment: str, variant: str) -> dict[str, Any]:
    """The pair, or a not-run record where a kit has no certificate side (its registry entry's parts)."""
    lacking = [fw for fw in pair if not REGISTRY[fw].has("certify")]
    if not lacking:
        return pair
    return not_run(pair, f"the {label(lacking[0])} kit has no certificate side (its registry entry's parts: "
                         f"{', '.join(REGISTRY[lacking[0]].parts)}), so the pair is not certified", experiment,
                   variant)


def is_script(pair: dict[str, Any]) -> bool:
    return all(spec.get("source") == "script" for spec in pair.values())


def not_run(pair: dict[str, Any], reason: str, experiment: str | None = None, variant: str | None = None,
            frameworks: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The record of a certificate that did not run, in the certificate's own shape. ``frameworks``: the pair's
    (the reference first), where ``pair`` lacks one; by default the pair's own."""
    if pair.get("status") == "not-run":
        return pair
    specs = [s for s in pair.values() if isinstance(s, dict) and "run_id" in s]
    experiment = experiment or specs[0]["experiment"]
    fws = frameworks or tuple(pair)
    return {"schema": "reprokit.certificate/1", "experiment": experiment,
            "profile": specs[0]["profile"] if specs else None,
            "variant": {fw: (pair[fw]["variant"] if fw in pair else variant) for fw in fws},
            "status": "not-run", "summary": f"not run: {reason}", "message": reason, "checks": []}


# Provenance that names the code rather than says what it is: the kits' content (code_sha256) and the host's
# (_host_code) stand for it, so that another clone or a commit that changes neither reuses a certificate; a script's
# files' hashes stand for its commit and the path it was given by.
NOT_CONTENT = ("code_commit", "code_dirty", "kit_version", "script_commit", "script_dirty", "script_given")


def _certified_part(spec: dict[str, Any]) -> dict[str, Any]:
    provenance = {k: v for k, v in spec["provenance"].items() if k not in NOT_CONTENT}
    data = {k: v for k, v in spec["data"].items() if k != "file"}      # its sha256 stands for the file
    if spec.get("source") == "script":        # the scripts' files, their data and where they run
        return {"experiment": spec["experiment"], "profile": spec["profile"], "device": spec["device"],
                "script": spec["script"], "data": data, "provenance": provenance}
    train = {k: v for k, v in spec["train"].items() if k not in UNCERTIFIED_TRAIN}
    return {"experiment": spec["experiment"], "profile": spec["profile"], "device": spec["device"],
            "model": spec["model"], "data": data, "train": train, "numerics": spec["numerics"],
            "pitfalls": certified(spec["pitfalls"]), "provenance": provenance}


@functools.lru_cache(maxsize=1)
def _host_code() -> str:
    """The host code that makes and judges a certificate: this package (the comparisons, tolerances, pairing
    and sizes) and the model costs that decide its reduced width. The kits' is in each spec's provenance."""
    here = tree_sha256(Path(__file__).parent) + sha256_file(Path(model_cost.__file__))
    return hashlib.sha256(here.encode()).hexdigest()


def cache_key(pair: dict[str, Any], budget: float) -> str:
    """What the certificate certifies, with the trajectory budget (FLOPs) it runs under (one made on an
    H100 is not an L4's, whose budget runs the costly checks at a smaller width), the steps a matrix runs
    on its device, and the code that makes and judges it."""
    body: dict[str, Any] = {fw: _certified_part(spec) for fw, spec in pair.items()}
    body["trajectory_budget"] = budget
    body["steps"] = matrix_steps(pair[REFERENCE]["device"])
    body["host_code"] = _host_code()
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def by_key(pairs: list[dict[str, Any]], budget: float) -> dict[str, list[int]]:
    """The pairs' indices grouped by what the certificate looks at: pairs that differ only in a pitfall of
    the loop (a sync, a metric, a copy) share one certificate."""
    out: dict[str, list[int]] = {}
    for i, pair in enumerate(pairs):
        out.setdefault(cache_key(pair, budget), []).append(i)
    return out


# What the dropout passes and the trajectories may cost, in FLOPs, before they run at a reduced width.
# On a CPU about a minute of a 2-core CPU's fp32 and fp64 matmul rate. On a GPU the fp64 trajectory is
# the costly part, and fp64 runs at 1/2 of fp32 on an H100 but 1/64 on an L4 or A10: so a time at the
# GPU's fp64 peak. 6 s keeps an H100 SXM (34 TFLOP/s) at 2.0e14, the single GPU budget this replaces,
# under which VGG16 at 224 (1.6e14) runs at full width in seconds. Real fp64 convolutions reach a
# fraction of the peak: the trajectories take some multiple of 6 s.
CPU_BUDGET_FLOPS = 1e12
GPU_BUDGET_S = 6.0
STEPS, DROPOUT_PASSES, DROPOUT_SAMPLES = 10, 128, 8      # reprokit/kits/framework_free/certificate.py's defaults
# fp32, fp32 perturbed, fp32 reference, fp64, and fp64 from weights one ulp apart (cert.ULP_BASELINES draws)
TRAJECTORIES = 4 + cert.ULP_BASELINES
# A matrix's certificates on a CPU run CPU_STEPS steps in each trajectory, not the kit's ten (the suite's
# certificates and a GPU's keep ten): each framework process of the quick matrix then takes under 30 s on 2
# cores (measured: PyTorch 27 s and TensorFlow 27 s for the four SimpleCNN and VGG16 jobs, 22 s for the tuned
# VGG16; 40 s and 45 s beside another CPU-bound process), where the fp64 trajectories were the costly part.
# Every difference the trajectories are there for still shows: a loss, a learning rate or Adam's epsilon at
# the first point after step 1, a momentum (SGD's, Adam's beta1) at the second, whose update is the first to
# carry the previous one; a real difference grows from there (Adam's epsilon placement: 8e-4 in ten steps,
# 800 times loss_rtol), and fewer steps only move the chaotic horizon (ResNet-50's rounding crosses a tenth
# of loss_rtol at step 7) out of reach. The dropout passes stay at the kit's 128 (what tells a rate of 0.1
# from 0.2 at the false-alarm rate): a second a job.
CPU_STEPS = 5


def trajectory_cost(spec: dict[str, Any], steps: int = STEPS) -> float | None:
    """FLOPs of the dropout passes and the trajectories (None: a custom model, not counted ahead)."""
    flops = model_cost.training_flops_per_sample(spec["model"], spec["data"]["input_size"])
    if flops is None:
        return None
    samples: int = TRAJECTORIES * (steps + 1) * spec["train"]["batch_size"]
    return flops * samples + flops / 3 * DROPOUT_PASSES * DROPOUT_SAMPLES


def _cost(spec: dict[str, Any], steps: int) -> float:
    """trajectory_cost of a built-in model's spec, which is always counted."""
    cost = trajectory_cost(spec, steps)
    assert cost is not None
    return cost


def matrix_steps(device: str) -> int:
    """The steps of each trajectory of a matrix's certificates on this device."""
    return CPU_STEPS if device == "cpu" else STEPS


def trajectory_budget(device: str, gpu_name: str | None) -> tuple[float, str]:
    """The FLOPs the dropout passes and trajectories may cost on this device, and how that was made."""
    if device == "cpu":
        return CPU_BUDGET_FLOPS, "the CPU budget, about a minute of a 2-core CPU's fp32 and fp64 matmul rate"
    peak, source = utilisation.device_peak(gpu_name, "fp64") if gpu_name else (None, "the GPU's name is not known")
    if peak:
        return GPU_BUDGET_S * peak, f"{GPU_BUDGET_S:g} s at the {gpu_name}'s fp64 peak of {peak:.3g} FLOP/s ({source})"
    # Unknown, a MIG slice or unnamed (a Ray cluster's): assume the slowest, so that no GPU runs for minutes.
    row = utilisation.slowest("fp64")
    return GPU_BUDGET_S * row["fp64"], (f"{source}: {GPU_BUDGET_S:g} s at the fp64 peak of the slowest known fp64 "
                                        f"GPU, the {row['names'][0]}'s {row['fp64']:.3g} FLOP/s ({row['source']})")


def reduced(pair: dict[str, Any], budget: float | None = None, why: str = "given by the caller",
            steps: int = STEPS) -> tuple[dict[str, Any], str] | None:
    """The pair at the widest width whose dropout passes and trajectories (of ``steps`` steps) fit the budget
    (FLOPs, made as ``why`` says; by default the device's without a GPU name), with why; None where they fit
    at the timed width (or the model's cost cannot be told ahead: a custom model)."""
    counted = [trajectory_cost(spec, steps) for spec in pair.values()]
    costs = [c for c in counted if c is not None]
    if len(costs) != len(counted):
        return None
    if budget is None:
        budget, why = trajectory_budget(pair[REFERENCE]["device"], None)
    if max(costs) <= budget:
        return None
    factor = 0.5
    while factor > 1 / 1024:
        small = {fw: _narrower(spec, factor) for fw, spec in pair.items()}
        if max(_cost(s, steps) for s in small.values()) <= budget:
            break
        factor /= 2
    width = small[REFERENCE]["model"]["width_multiplier"]
    return small, (f"the dropout passes and the trajectories would cost {max(costs):.1e} FLOPs at the timed width, "
                   f"over the {budget:.2g} budget on a {pair[REFERENCE]['device']} ({why}): they ran at width "
                   f"{width:g} ({factor:g} of the timed model's), at the timed input size and batch")


def _narrower(spec: dict[str, Any], factor: float) -> dict[str, Any]:
    small = copy.deepcopy(spec)
    model = small["model"]
    model["width_multiplier"] *= factor
    if model.get("classifier_width"):
        model["classifier_width"] = max(1, round(model["classifier_width"] * factor))
    return small


def file_name(cert: dict[str, Any]) -> str:
    """certificate-<experiment>-<variant>[-<framework>].json; the variant named after its single change, else its
    non-fixed side (a "-tf_p" pair holds PyTorch's as_posted: its name is the change's, not as_posted's); the
    framework paired with the reference named where it is not the registry's second (so those names stay)."""
    named = [v for v in cert["variant"].values() if v and v != FIXED] or [FIXED]
    changes = [v for v in named if v.startswith((runs.ADDED, runs.REMOVED))]
    other = next((fw for fw in cert["variant"] if fw != REFERENCE), FRAMEWORKS[1])
    pair = "" if other == FRAMEWORKS[1] else f"-{other}"
    devices = max((cert.get("devices") or {}).values(), default=1)
    at_n = f"-at{devices}" if devices > 1 else ""           # a sweep's pairs, one certificate per device count
    return f"certificate-{cert['experiment']}-{(changes or named)[0]}{pair}{at_n}.json"

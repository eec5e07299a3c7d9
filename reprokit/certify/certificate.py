"""The equivalence certificate of an experiment, checked before any timing.

``certify_many`` (one experiment or several, for the price of one) runs
``python -m reprokit.kits.certify`` once in each framework's environment: the reference (the registry's first,
PyTorch) first, exporting each model's freshly initialised weights in a framework-neutral canonical
form, then the other framework of the pair (TensorFlow), loading them. It then compares what the two
wrote (reprokit/kits/framework_free/certificate.py holds the comparisons):

- ``optimizer``: the optimizer each kit built, read back from the object, against its spec;
- ``layers``: per-layer canonical parameter shapes and counts (NCHW/OIHW mapped to NHWC/HWIO,
  a dense layer's rows to NHWC flatten order however the model flattens);
- ``flops``: the models' arithmetic, every convolution and matrix product at its shape, forward
  and backward (reprokit/kits/framework_free/arithmetic.py); the first product that differs is named;
- ``layers_without_parameters``: activations, pooling, the padding each convolution applied,
  normalisation axes, dropout rates and masks, as each framework's trace shows them;
- ``outputs``: each model returns (batch, classes) logits where its kit's loss takes logits;
- ``logits``: the same initial weights on the first test samples, fp32 in evaluation mode as the
  kits run, and fp64 in evaluation and training mode, max difference relative to the largest
  |logit| within ``logits_rtol``;
- ``dropout``: training-mode outputs of the same weights over many passes, each framework with
  its own dropout masks, compared by a permutation test at a false-alarm rate of 1e-3
  (reprokit/kits/framework_free/stochastic.py): a dropout layer present, of another rate, kind or place fails it;
- ``loss_trajectory``: ten optimizer steps (a matrix's on a CPU: five, certify_plan.matrix_steps) on the
  kit's first training batches, dropout off, the models, losses and optimizers rebuilt in float64 so
  that rounding neither hides nor fakes a difference; max relative difference within ``loss_rtol``,
  judged up to the step where rounding alone (the same steps from weights one float64 ulp apart, per
  framework) still stays within a tenth of it: a deep network with BatchNorm in training mode amplifies
  rounding by orders of magnitude per step (ResNet-50 at width 0.125: 1e-15 to 1e-2 in ten steps, within
  one framework), and past that horizon a framework parts from itself as far as from the other; a real
  difference shows before it;
- ``loss_trajectory_fp32``: the same ten steps through each kit's own fp32 train_step, gated: the
  cross-framework divergence stays within ``trajectory_factor`` times a same-framework baseline
  (the same steps with the inputs one float32 ulp up, and the framework's own fp32 rounding
  against fp64), step by step;
- informational: how far the weights drifted apart over the fp64 steps;
- where they part, when the logits or a trajectory differ (reprokit/kits/framework_free/parting.py):
  ``first_parting_layer`` names the first layer whose fp64 output (evaluation mode, dropout off, the same
  weights, the first samples of the fixed batch) differs beyond ``layer_rtol`` of its scale, with both
  frameworks' settings of it and those that differ; ``first_parting_gradient`` the first step at which the
  fp64 losses part, and the first step and tensor, in backward order, whose gradient parts.

Declared optimizer differences that can be removed exactly (Adam's epsilon placement) are removed
from the trajectories and named. Known semantic differences are listed in ``declared_differences``
next to the spec's own, each with how the certificate handles it (reprokit/certify/differences.py).

Default tolerances, from what was measured on the quick profiles (2 CPU cores): fp32 logits agree
to 7.5e-7 of the largest |logit| at most (VGG16 at width 0.125, 48x48); the fp64 trajectories to
1.8e-9 (quick SimpleCNN: BatchNorm in training mode amplifies rounding about tenfold per step),
1.2e-12 (the tests' tiny SimpleCNN) and 4e-16 (VGG, Adam). ``loss_rtol`` 1e-6 leaves a factor of
500 over the worst of these, while the smallest real differences measured are 2.5e-7 (Keras's
float32-rounded momentum, in fp64), 8e-4 (Adam's epsilon placement) and 0.2 (BatchNorm epsilon
1e-3 against 1e-5). ``logits_rtol`` 1e-4 leaves a factor of 100 over 7.5e-7.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from reprokit.certify import certify_plan
from reprokit.certify.certify_sides import Job, run_jobs
from reprokit.certify.certify_sides import pair_of as _pair
from reprokit.certify.differences import KNOWN_PAIR, declared_differences, spec_differences
from reprokit.errors import UserError
from reprokit.kits.contract.files import write_json_atomic
from reprokit.kits.contract.names import REFERENCE, label
from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free import certificate as cert
from reprokit.kits.framework_free import custom, model_checks, numeric_checks, parting
from reprokit.runners.base import Runner

SCHEMA = "reprokit.certificate/1"
DEFAULT_TOLERANCES = {"logits_rtol": 1e-4, "loss_rtol": 1e-6, "trajectory_factor": 10.0, "layer_rtol": 1e-7}
TOLERANCE_MEANING = {
    "logits_rtol": "max difference of the logits of the same weights on the same batch, relative to the "
                   "largest |logit|",
    "loss_rtol": "max relative difference of the fp64 loss trajectory, step by step",
    "trajectory_factor": "how many times the same-framework baseline (inputs one float32 ulp up; the "
                         "framework's own fp32 rounding against fp64) the fp32 cross-framework divergence may "
                         "reach, step by step",
    "layer_rtol": "max difference of a layer's fp64 output (or of a gradient in the fp64 steps) from the same "
                  "weights, relative to its largest |value|, beyond which the two models part there",
}
TIMEOUT_S = 900
SIDE_NAME, WEIGHTS_NAME, AFTER_NAME = cert.SIDE_NAME, cert.WEIGHTS_NAME, cert.AFTER_NAME


def validate_tolerances(tolerances: dict[str, Any] | None) -> dict[str, Any]:
    """The defaults with the given ones applied; anything but a positive finite number is refused."""
    if tolerances is None:
        tolerances = {}
    if not isinstance(tolerances, dict):
        raise UserError(f"certificate tolerances must be a table of name = number, got {tolerances!r}")
    out = dict(DEFAULT_TOLERANCES)
    for key, value in tolerances.items():
        if key not in DEFAULT_TOLERANCES:
            raise UserError(f"certificate tolerance {key!r} is unknown; the tolerances are "
                            f"{', '.join(DEFAULT_TOLERANCES)}")
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or value <= 0):
            raise UserError(f"certificate tolerance {key} must be a positive number, got {value!r}")
        out[key] = float(value)
    return out


def _check_inputs(specs: dict[str, dict[str, Any]], data_dir: Path) -> None:
    if len(specs) != 2 or REFERENCE not in specs:
        raise UserError(f"the certificate compares {REFERENCE} and one other framework; got specs for "
                        f"{', '.join(sorted(specs)) or 'none'}")
    for fw, spec in specs.items():
        if spec.get("framework") != fw:
            raise UserError(f"the spec given for {fw} is a {spec.get('framework')!r} spec")
    a, b = (specs[fw] for fw in _pair(specs))
    if a.get("experiment") != b.get("experiment"):
        raise UserError(f"the two specs are of different experiments ({a.get('experiment')!r} and "
                        f"{b.get('experiment')!r}); a certificate compares one experiment")
    if a["data"].get("sha256") != b["data"].get("sha256"):
        raise UserError("the two specs name different prepared datasets; plan both frameworks from the same data")
    if not Path(data_dir).is_dir():
        raise UserError(f"the data directory {data_dir} does not exist; prepare the data before certifying")


def skipped(name: str, reason: str) -> dict[str, Any]:
    return {"name": name, "passed": None, "skipped": reason, "evidence": f"skipped: {reason}"}


def _weights_after(folders: dict[str, Path]) -> dict[str, Any] | None:
    try:
        return {fw: dict(np.load(folder / AFTER_NAME)) for fw, folder in folders.items()}
    except (OSError, ValueError):
        return None


def _summary(result: dict[str, Any]) -> str:
    """One sentence for the report's banner; the checks carry the numbers."""
    status, checks, message = result["status"], result["checks"], result["message"]
    if status == "error":
        return f"no certificate: {message}"
    if status == "fail" and not checks:
        return f"not certified: {message}"
    by = {c["name"]: c for c in checks}
    failed = [c for c in checks if c["passed"] is False]
    if failed:
        return "NOT equivalent: " + "; ".join(
            (c.get("mismatches") or [c["evidence"]])[0] if c["name"] == "layers" else f"{c['name']}: {c['evidence']}"
            for c in failed) + "".join(f"; {by[n]['evidence']}" for n in ("first_parting_layer",) if n in by)
    n = by["layers"]["numbers"]["parameters"][REFERENCE]
    flops = by["flops"]["numbers"]["per_sample"][REFERENCE]
    logits = max(v["relative"] for v in by["logits"]["numbers"].values())
    trajectory = by["loss_trajectory"]["numbers"]
    loss, points = trajectory["max_relative_difference"], len(trajectory["relative_difference"])
    judged = trajectory.get("judged_points", points)
    horizon = (f" over its first {judged} of {points} points (past them rounding alone parts it)"
               if judged < points else "")
    return (f"equivalent within the declared tolerances: the same {n:,} parameters layer by layer, the same "
            f"arithmetic ({flops:,.0f} training FLOPs per sample) and layers without parameters, logits within "
            f"{logits:.1e} of their scale, dropout alike, fp64 loss trajectory within {loss:.1e} (relative){horizon}, "
            f"fp32 within {by['loss_trajectory_fp32']['numbers']['factor']:g}x its same-framework baseline")


def certify_many(pairs: list[dict[str, dict[str, Any]]], runner: Runner, work_dirs: list[Path],
                 tolerances: dict[str, Any] | None = None, timeout_s: float = TIMEOUT_S,
                 trajectory_budget: float | None = None, trajectory_budget_why: str = "given by the caller",
                 log: Callable[[str], None] = lambda line: None, steps: int = cert.STEPS) -> list[dict[str, Any]]:
    """Certify, for each pair of specs, that the two frameworks' runs of its experiment compute the same
    thing, with one process per framework for all of them that share their thread settings
    (``timeout_s`` per experiment). Each result is written to its own work dir
    (``work_dirs[i]/certificate.json``); the processes' files are under the first one
    (``batch-<n>/<framework>/<job>/``).

    Both sides run through ``runner`` (reprokit.runners.base.Runner), the one the timed runs use:
    in Docker the PyTorch container writes the initial weights to its output folder and the
    TensorFlow container reads them read-only. The certificate records what each side ran on
    (``runner.describe``: lock hash, image) beside the launcher's facts.

    Each result is {"schema", "experiment", "profile", "variant", "status": "pass"|"fail"|"error",
    "summary", "message", "checks": [{"name", "passed": True|False|None, "evidence", "numbers"?,
    "skipped"?}], "declared_differences", "neutralised", "spec_differences", "tolerances", "setup",
    "frameworks", "ran_on", "wall_s"}. "fail" with a one-sentence ``message``: a user's model that
    cannot run as the experiment says (its builder raises, it returns probabilities or the wrong
    shape, it cannot take the other's weights). "error": the certificate itself could not run. Bad
    input (a tolerance that is not a positive number, specs of two experiments, no data) raises
    UserError before anything runs.

    A pair whose dropout passes and trajectories would exceed the budget (certify_plan.reduced) is
    certified twice in the same processes: its layers, arithmetic, layers without parameters, outputs
    and fp32 logits at the timed size, and those costly checks again at a declared reduced width
    (``trajectory_budget`` in FLOPs, made as ``trajectory_budget_why`` says, replaces the device's default
    budget; certify_plan.trajectory_budget gives both for a GPU by name). ``steps``: of each trajectory (a
    matrix's on a CPU: certify_plan.matrix_steps). ``log`` gets a line as each framework process starts, as
    each of its jobs ends (in how many seconds, how many left) and as it ends, so minutes of certificates are
    not silent."""
    t0 = time.perf_counter()
    tol = validate_tolerances(tolerances)
    for specs in pairs:
        _check_inputs(specs, runner.data_dir)
    works = [Path(w) for w in work_dirs]
    for work in works:
        work.mkdir(parents=True, exist_ok=True)
    plans = [certify_plan.reduced(specs, trajectory_budget, trajectory_budget_why, steps) for specs in pairs]
    # Jobs: each pair at its timed size, then the reduced-width pairs: (pair index, specs, parts).
    jobs = [Job(i, specs, "structure" if plans[i] else "all", part="structure at the timed size" if plans[i] else "")
            for i, specs in enumerate(pairs)]
    jobs += [Job(i, plan[0], "all", part=f"costly checks at width {plan[0][REFERENCE]['model']['width_multiplier']:g}")
             for i, plan in enumerate(plans) if plan]
    for job in jobs:
        job.result = _new(job.specs, tol, runner)
    run_jobs(jobs, runner, works, timeout_s, log, steps,
             lambda job, fw, side, text: _take_side(job.result, job.sides, fw, side, text))
    for job in jobs:
        if set(job.sides) == set(job.specs):
            _compare(job.result, job.sides, job.specs, job.folders, tol)
    out = [job.result for job in jobs[:len(pairs)]]
    for job in jobs[len(pairs):]:
        plan = plans[job.pair]
        assert plan is not None                     # a reduced-width job is of a pair that has a plan
        _add_reduced(out[job.pair], job.result, plan[1], job.specs)
    for i, result in enumerate(out):
        result["summary"] = _summary(result)
        result["wall_s"] = time.perf_counter() - t0
        write_json_atomic(works[i] / "certificate.json", result)
    return out


REDUCED_CHECKS = ("dropout", "loss_trajectory", "loss_trajectory_fp32", "weights_after_steps", "first_parting_layer",
                  "first_parting_gradient")
INFORMATIONAL = ("weights_after_steps", "first_parting_layer", "first_parting_gradient")


def _add_reduced(result: dict[str, Any], small: dict[str, Any], reason: str, specs: dict[str, dict[str, Any]]) -> None:
    """The dropout and trajectory checks of the reduced-width certificate, into the timed size's, named as such."""
    width = specs[REFERENCE]["model"]["width_multiplier"]
    result["reduced"] = {"width_multiplier": width, "reason": reason, "status": small["status"],
                         "message": small["message"]}
    if result["status"] == "error" or (result["status"] == "fail" and not result["checks"]):
        return                                      # the timed size could not be certified at all
    checks = {c["name"]: c for c in small["checks"]}
    for name in REDUCED_CHECKS:
        if name in checks:
            c = checks[name]
            result["checks"].append({**c, "evidence": f"at width {width:g} (reduced): {c['evidence']}",
                                     "width_multiplier": width})
        elif name not in INFORMATIONAL:
            result["checks"].append(skipped(name, f"the reduced-width certificate did not get to it: "
                                                   f"{small['message'] or small['status']}"))
    result["neutralised"] = small.get("neutralised") or result["neutralised"]
    result["status"] = "fail" if any(c["passed"] is False for c in result["checks"]) else (
        "pass" if small["status"] == "pass" else small["status"])


def _new(specs: dict[str, dict[str, Any]], tol: dict[str, Any], runner: Runner) -> dict[str, Any]:
    pair = _pair(specs)
    ref, other = (specs[fw] for fw in pair)
    return {"schema": SCHEMA, "experiment": ref["experiment"], "profile": ref.get("profile"),
            "variant": {fw: specs[fw].get("variant") for fw in pair},
            "pitfalls": {fw: specs[fw].get("pitfalls", []) for fw in pair},
            "status": "error", "summary": "", "message": None, "checks": [],
            "declared_differences": declared_differences(specs), "neutralised": [],
            "spec_differences": spec_differences(ref, other, labels=(label(pair[0]), label(pair[1]))),
            "tolerances": {k: {"value": v, "meaning": TOLERANCE_MEANING[k]} for k, v in tol.items()},
            "setup": None, "frameworks": {},
            "ran_on": {fw: {**runner.describe(fw), "backend": runner.name} for fw in pair}}


def _take_side(result: dict[str, Any], sides: dict[str, Any], fw: str, side: dict[str, Any] | None, text: str) -> None:
    """Keep one side's findings, or say in one sentence why the certificate stops there."""
    if side is None:
        result["message"] = text
        return
    if side.get("status") == "bad-model":          # the user's model: a failed certificate, in one sentence
        result.update(status="fail", message=side["message"])
        return
    if side.get("status") in ("failed", "unmappable") or "layers" not in side:
        kind = "has no canonical form" if side.get("status") == "unmappable" else "failed"
        result["message"] = f"the {label(fw)} side {kind}: {side.get('message')}"
        return
    sides[fw] = side
    result["frameworks"][fw] = side.get("environment", {})


def _compare(result: dict[str, Any], sides: dict[str, dict[str, Any]], specs: dict[str, dict[str, Any]],
             folders: dict[str, Path], tol: dict[str, Any]) -> None:
    ref, other = _pair(specs)
    pt, tf = sides[ref], sides[other]
    if (ref, other) != KNOWN_PAIR:
        result["declared_differences"] = declared_differences(specs, sides)
    result["setup"] = pt.get("setup")
    result["neutralised"] = pt.get("neutralised", []) + tf.get("neutralised", [])
    checks = result["checks"]
    checks.append(model_checks.compare_optimizer({fw: s["optimizer"] for fw, s in sides.items()},
                                         {fw: specs[fw]["train"]["optimizer"] for fw in (ref, other)}))
    layers = model_checks.compare_layers({ref: pt["layers"], other: tf["layers"]})
    checks.append(layers)
    checks.append(model_checks.compare_flops(sides))
    checks.append(model_checks.compare_structure(sides))
    checks.append(parting.compare_normalisations({fw: sides[fw] for fw in (ref, other)}))
    if not layers["mapped"]:
        who = {fw: custom.who(RunSpec.from_dict(specs[fw]), fw) for fw in (ref, other)}
        result["message"] = (f"{who[other]} cannot take the weights of {who[ref]}: "
                             f"{layers['mismatches'][0]}")
        reason = ("the two models have different parameters, so one set of weights cannot be loaded into both "
                  "(the same initial weights are what the logits, dropout and trajectory checks compare)")
        checks += [skipped(n, reason) for n in ("outputs", "logits", "dropout", "loss_trajectory",
                                                   "loss_trajectory_fp32")]
        result["status"] = "fail"
        return
    if tf.get("status") == "refused":
        result["message"] = f"the {label(other)} side refused the {label(ref)} weights: {tf.get('message')}"
        return
    problems = [p for p in (model_checks.check_outputs(fw, s["outputs"]) for fw, s in sides.items()) if p]
    checks.append({"name": "outputs", "passed": not problems,
                   "evidence": "; ".join(problems) if problems else
                   f"both return {cert.shape_text(pt['outputs']['shape'])} outputs, as logits where their loss "
                   f"takes logits"})
    if problems:
        result["message"] = problems[0]
    checks.append(numeric_checks.compare_logits({ref: pt["logits"], other: tf["logits"]}, tol["logits_rtol"]))
    if "losses" not in pt or "losses" not in tf:    # structure only: the costly checks run at a reduced width
        result["status"] = "fail" if any(c["passed"] is False for c in checks) else "pass"
        return
    checks.append(numeric_checks.compare_dropout({ref: pt["train_outputs"], other: tf["train_outputs"]}))
    setup = pt["setup"]
    removed = ", ".join(d["field"] for d in result["neutralised"])
    checks.append(numeric_checks.compare_losses(
        {ref: pt["losses"]["fp64"], other: tf["losses"]["fp64"]}, tol["loss_rtol"],
        f"fp64, batches of {setup['step_batch_size']} in the kit's order, dropout off"
        + (f", removed: {removed}" if removed else "") + "; the last point is batch 1 again after the last step",
        setup["steps"], baseline={fw: s["losses"]["fp64_ulp_apart"] for fw, s in sides.items()}))
    checks.append(numeric_checks.compare_fp32_trajectory(
        {fw: {"kit": s["losses"]["fp32"], "perturbed": s["losses"]["fp32_perturbed"],
              "reference": s["losses"]["fp32_reference"], "exact": s["losses"]["fp64"][:setup["steps"]]}
         for fw, s in sides.items()}, tol["trajectory_factor"]))
    after = _weights_after(folders)
    if after:
        checks.append(numeric_checks.compare_after_steps(after))
    checks += where_they_part(sides, folders, checks, tol)
    result["status"] = "fail" if any(c["passed"] is False for c in checks) else "pass"


TRAJECTORIES = ("loss_trajectory", "loss_trajectory_fp32")


def where_they_part(sides: dict[str, dict[str, Any]], folders: dict[str, Path], checks: list[dict[str, Any]],
                    tol: dict[str, Any]) -> list[dict[str, Any]]:
    """Where the logits or trajectories that differ part, from the outputs and gradients each side recorded
    beside its side.json (reprokit/kits/framework_free/parting.py): informational checks, only where one of those
    failed."""
    failed = {c["name"] for c in checks if c["passed"] is False}
    if not failed & {"logits", *TRAJECTORIES}:
        return []
    out = []
    arrays = {fw: parting.load(folders[fw] / parting.OUTPUTS_NAME) for fw, s in sides.items() if "layer_outputs" in s}
    missing = [f"{label(fw)}: {s.get('layer_outputs_error') or 'no layer outputs recorded'}"
               for fw, s in sides.items() if arrays.get(fw) is None]
    if missing:
        out.append({"name": "first_parting_layer", "passed": None,
                    "evidence": f"where they part is not known ({'; '.join(missing)})"})
    else:
        rtol = tol["layer_rtol"] if sides[REFERENCE]["layer_outputs"]["precision"] == "fp64" else tol["logits_rtol"]
        out.append(parting.compare_outputs(sides, {fw: a for fw, a in arrays.items() if a is not None}, rtol))
    if failed & set(TRAJECTORIES) and all("gradients" in s and "losses" in s for s in sides.values()):
        grads = {fw: parting.load(folders[fw] / parting.GRADIENTS_NAME) for fw in sides}
        if all(g is not None for g in grads.values()):
            out.append(parting.compare_gradients(
                sides, {fw: g for fw, g in grads.items() if g is not None}, sides[REFERENCE]["layers"],
                {fw: s["losses"]["fp64"] for fw, s in sides.items()}, tol["loss_rtol"], tol["layer_rtol"]))
    return out

"""The equivalence certificate of two scripts: the models they train, as the probe captured them.

Each script runs under the probe with ``--certify``, through the runner the timed runs use,
PyTorch's first. At the script's first optimizer step, before the update, the probe puts the model
that the optimizer steps into the certificate's canonical form (reprokit/kits/framework_free/certificate.py), from
the object itself as the script built and changed it, and stops the script. The PyTorch side also
writes its initial weights and the batch its model received; the TensorFlow script then runs to its
own first step, and its model starts from those weights on that batch. Compared:

- ``optimizer``: the two optimizers the scripts stepped, read back, against each other;
- ``layers``: per-layer canonical shapes and counts; where the lists differ, every difference named
  (layers of each kind, one set of weights used at several places, the totals);
- ``flops`` and ``layers_without_parameters``: each model's traced arithmetic and the layers between;
- ``modes``: whether each model trained in training mode; where a script left its dropout or BatchNorm
  in evaluation mode, the layers without parameters again as each model is built;
- ``outputs``: one row per class of the data, as logits or probabilities as each script's own loss takes;
- ``logits`` and ``dropout``: the same weights on the same batch, in evaluation mode and over many
  training-mode passes in the mode each script trained in; compared as probabilities where one
  script's model returns probabilities and the other's logits;
- ``first_parting_layer``, where the logits differ: the first layer whose fp32 output parts beyond
  ``logits_rtol`` of its scale, with both models' settings of it (a captured model is not rebuilt in fp64).

The loss trajectories are not checked here: they need each script's own loss and optimizer replayed
in fp64, and the certificate says so.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reprokit.certify.certificate import SCHEMA, TOLERANCE_MEANING, skipped, validate_tolerances, where_they_part
from reprokit.kits.contract.files import write_json_atomic
from reprokit.kits.contract.names import REFERENCE, label
from reprokit.kits.framework_free import arithmetic, model_checks, numeric_checks, rank_checks
from reprokit.kits.framework_free import certificate as cert
from reprokit.runners.base import RESULT_NAME, Outcome, Runner, spec_call

NOT_REPLAYED = ("not checked for scripts: the trajectory replays each script's own loss and optimizer in fp64 from "
                "the same weights, which the probe does not do")
SAMPLES = "the first {n} samples of the batch the PyTorch script's model received at its first step"


def certify_scripts(pair: dict[str, dict[str, Any]], runner: Runner, work: Path,
                    tolerances: dict[str, Any] | None = None,
                    log: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Certify that two scripts train the same model. Returns (and writes to ``work/certificate.json``) a
    certificate of the kit's shape (reprokit/certify/certificate.py), with ``source: "script"`` and the models the
    probe captured in each."""
    t0 = time.perf_counter()
    tol = validate_tolerances(tolerances)
    result = _new(pair, tol, runner)
    sides: dict[str, dict[str, Any]] = {}
    folders: dict[str, Path] = {}
    for fw in _frameworks(pair):                # the reference first: it writes the initial weights
        log(f"certificate: the {label(fw)} script runs to its first step under the probe ...")
        folders[fw], side, why = _side(fw, pair[fw], runner, work, folders.get(REFERENCE))
        if side is None or side.get("status") != "ok":
            result["message"] = why if side is None else f"the {label(fw)} side: {side.get('message')}"
            status = side.get("status") if side else None
            result["status"] = ("fail" if status in ("unmappable", "bad-model") else
                                "not-run" if status == "not-run" else "error")
            break
        sides[fw] = side
        result["frameworks"][fw] = side.get("environment", {})
        result["captured"][fw] = side.get("captured", [])
        result["calls"][fw] = side.get("call")
    if len(sides) == len(pair):
        _compare(result, sides, folders, tol)
    result["summary"] = _summary(result)
    result["wall_s"] = time.perf_counter() - t0
    write_json_atomic(work / "certificate.json", result)
    return result


def _side(fw: str, spec: dict[str, Any], runner: Runner, work: Path,
          weights_from: Path | None) -> tuple[Path, dict[str, Any] | None, str]:
    """One script under the probe to its first step: (its output folder, its side or None, why not)."""
    folder = work / fw
    folder.mkdir(parents=True, exist_ok=True)
    spec_path = folder / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=1, sort_keys=True))
    call = spec_call(spec, spec_path, folder / "out", runner.data_dir)
    extra = ("--weights-from", weights_from) if weights_from else ()
    call = dataclasses.replace(call, args=(*call.args, "--certify", *extra), label=f"certify-{spec['run_id']}",
                               inputs=(*call.inputs, *((weights_from,) if weights_from else ())))
    outcome = runner.run(call, lambda event: None)
    if outcome.interrupted:
        raise KeyboardInterrupt
    if outcome.timed_out:
        return call.output, None, f"the {label(fw)} script did not reach its first step within {call.timeout_s:.0f} s"
    try:
        return call.output, json.loads((call.output / cert.SIDE_NAME).read_text()), ""
    except (OSError, json.JSONDecodeError):
        return call.output, None, _why_no_side(fw, call.output, outcome)


def _why_no_side(fw: str, output: Path, outcome: Outcome) -> str:
    """The script ended before its first step: the run's own failure, or that no step came."""
    try:
        failure = json.loads((output / RESULT_NAME).read_text()).get("failure") or {}
    except (OSError, json.JSONDecodeError):
        failure = {}
    if failure.get("message"):
        return f"the {label(fw)} script trained no model the certificate could capture: {failure['message']}"
    tail = "\n".join(outcome.log_tail[-10:])
    return f"the {label(fw)} script ended (exit {outcome.exit_code}) before its first optimizer step:\n{tail}"


def _frameworks(pair: dict[str, dict[str, Any]]) -> tuple[str, ...]:
    """The pair's frameworks, the reference first."""
    return (REFERENCE, *(fw for fw in pair if fw != REFERENCE))


def _new(pair: dict[str, dict[str, Any]], tol: dict[str, Any], runner: Runner) -> dict[str, Any]:
    fws = _frameworks(pair)
    pt = pair[REFERENCE]
    return {"schema": SCHEMA, "source": "script", "experiment": pt["experiment"], "profile": pt["profile"],
            "variant": {fw: pair[fw]["variant"] for fw in fws}, "pitfalls": {fw: [] for fw in fws},
            "status": "error", "summary": "", "message": None, "checks": [], "declared_differences": [],
            "neutralised": [], "spec_differences": [], "captured": {}, "calls": {},
            "scripts": {fw: pair[fw]["script"]["path"] for fw in fws},
            "tolerances": {k: {"value": v, "meaning": TOLERANCE_MEANING[k]} for k, v in tol.items()
                           if k == "logits_rtol"},
            "setup": None, "frameworks": {}, "devices": {fw: pair[fw].get("devices", 1) for fw in fws},
            "ran_on": {fw: {**runner.describe(fw), "backend": runner.name} for fw in fws}}


def _compare(result: dict[str, Any], sides: dict[str, dict[str, Any]], folders: dict[str, Path],
             tol: dict[str, Any]) -> None:
    ref, other = _frameworks(sides)
    pt, tf = sides[ref], sides[other]
    result["setup"] = pt.get("setup")
    checks = result["checks"]
    checks.append(model_checks.compare_read_back_optimizers({fw: s["optimizer"] for fw, s in sides.items()}))
    layers = model_checks.compare_layers({fw: s["layers"] for fw, s in sides.items()})
    differences = model_checks.layer_differences(sides)
    if differences:
        layers["evidence"] += "; differences: " + "; ".join(differences)
        layers["mismatches"] = [*layers.get("mismatches", []), *differences]
    checks.append(layers)
    checks.append(model_checks.compare_flops(sides))
    checks.append(model_checks.compare_structure(sides))
    checks.append(_modes(sides))
    problems = [p for p in (model_checks.script_outputs(fw, s["outputs"]) for fw, s in sides.items()) if p]
    unknown = [label(fw) for fw, s in sides.items() if s["outputs"]["expects_logits"] is None]
    checks.append({"name": "outputs", "passed": not problems,
                   "evidence": "; ".join(problems) if problems else
                   f"both return {cert.shape_text(pt['outputs']['shape'])} outputs, as their own losses take them"
                   + (f" (the loss of {', '.join(unknown)} is not one the probe knows: what it takes is not "
                      f"checked)" if unknown else "")})
    same = _not_comparable(layers, tf, label(ref), label(other))
    if same:
        checks += [skipped(n, same) for n in ("logits", "dropout")]
    else:
        as_p, how = _space(sides)
        checks.append(_logits(sides, as_p, how, tol["logits_rtol"]))
        dropout = numeric_checks.compare_dropout(
            {fw: (numeric_checks.as_probabilities(s["train_outputs"]).tolist() if as_p[fw] else s["train_outputs"])
             for fw, s in sides.items()})
        dropout["evidence"] = how + dropout["evidence"]
        checks.append(dropout)
    checks.append(skipped("loss_trajectory", NOT_REPLAYED))
    checks += where_they_part(sides, folders, checks, tol)      # fp32 layer outputs, within logits_rtol
    checks += _at_n(result, folders)
    result["status"] = "fail" if any(c["passed"] is False for c in checks) else "pass"


def _at_n(result: dict[str, Any], folders: dict[str, Path]) -> list[dict[str, Any]]:
    """The checks at N devices (reprokit/kits/framework_free/rank_checks.py), where a side ran on more than one: from
    the evidence each process left at its first step (reprokit/kits/ranks/certified.py)."""
    devices = result.get("devices") or {}
    evidence = {fw: [json.loads(p.read_text()) for p in sorted((folder / cert.EVIDENCE_FOLDER).glob("*.json"))]
                if (folder / cert.EVIDENCE_FOLDER).is_dir() else [] for fw, folder in folders.items()}
    summaries = {fw: rank_checks.summary(e, devices.get(fw, 1)) for fw, e in evidence.items()}
    # each side's global batch, at any count: a sweep's certificate at N reads its count of 1's (certify_runs)
    result["global_batch"] = {fw: s.get("global_batch") for fw, s in summaries.items()}
    if max(devices.values(), default=1) <= 1:
        return []
    result["at_n"] = summaries
    return rank_checks.checks(evidence, devices, {})


def _modes(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The modes the models trained in, from the captured objects: a script that trains with its dropout or
    BatchNorm in evaluation mode trains another model than it builds. Where one does, the layers without
    parameters are compared again as each model is built (every module in training mode)."""
    off = {fw: (s.get("modes") or {}).get("in_eval") or [] for fw, s in sides.items()}
    if not any(off.values()):
        return {"name": "modes", "passed": True, "evidence": "both models trained in training mode"}
    parts = [f"{label(fw)}'s model trained with {len(names)} layer(s) in evaluation mode ({', '.join(names[:4])}"
             f"{f' and {len(names) - 4} more' if len(names) > 4 else ''}): dropout off, BatchNorm on its running "
             f"statistics" for fw, names in off.items() if names]
    (fa, a), (fb, b) = ((fw, s["modes"].get("ops_as_built") or s["ops"]) for fw, s in sides.items())
    built = arithmetic.first_structure_difference(a, b, label(fa), label(fb))
    parts.append("as built (every layer in training mode), " + (f"a layer without parameters differs: {built}"
                                                                if built else "the same layers without parameters"))
    return {"name": "modes", "passed": False, "evidence": "; ".join(parts), "numbers": off}


def _not_comparable(layers: dict[str, Any], tf: dict[str, Any], ref: str = "PyTorch",
                    other: str = "TensorFlow") -> str | None:
    """Why the same weights cannot be run through both models, or None."""
    if not layers["mapped"]:
        return ("the two models have different parameters, so one set of weights cannot be loaded into both "
                "(the same initial weights are what the logits and dropout checks compare)")
    if not tf.get("weights") or tf["weights"]["source"] != "loaded":
        return f"the {other} model did not start from the {ref} weights: it ran on {tf.get('input')}"
    return None


def _space(sides: dict[str, dict[str, Any]]) -> tuple[dict[str, bool], str]:
    """Which side's outputs to turn into probabilities: where one model returns probabilities and the other
    logits, both are compared as probabilities."""
    probs = {fw: bool(s["outputs"]["probabilities"]) for fw, s in sides.items()}
    if len(set(probs.values())) == 1:
        return dict.fromkeys(sides, False), ""
    logits_side = next(fw for fw, p in probs.items() if not p)
    return ({fw: fw == logits_side for fw in sides},
            f"as probabilities (softmax of {label(logits_side)}'s logits; the other model ends in a softmax): ")


def _logits(sides: dict[str, dict[str, Any]], as_p: dict[str, bool], how: str, rtol: float) -> dict[str, Any]:
    rows = {fw: {"fp32": {mode: numeric_checks.as_probabilities(out).tolist() if as_p[fw] else out
                          for mode, out in s["logits"]["fp32"].items()}} for fw, s in sides.items()}
    check = numeric_checks.compare_logits(rows, rtol, SAMPLES)
    check["evidence"] = how + check["evidence"]
    return check


def _summary(result: dict[str, Any]) -> str:
    status, checks, message = result["status"], result["checks"], result["message"]
    if not checks:
        return f"{ {'fail': 'not certified', 'not-run': 'not run'}.get(status, 'no certificate')}: {message}"
    failed = [c for c in checks if c["passed"] is False]
    by = {c["name"]: c for c in checks}
    if failed:
        return "NOT the same model: " + "; ".join(f"{c['name']}: {c['evidence']}" for c in failed) + "".join(
            f"; {by[n]['evidence']}" for n in ("first_parting_layer",) if n in by)
    n = by["layers"]["numbers"]["parameters"][REFERENCE]
    if by["logits"].get("skipped"):
        return (f"the same {n:,} parameters layer by layer and the same arithmetic; the outputs of the same weights "
                f"{by['logits']['evidence']}; the loss trajectories are not checked for scripts")
    logits = max(v["relative"] for v in by["logits"]["numbers"].values() if v)
    return (f"the same model in both scripts, as captured at their first step: {n:,} parameters layer by layer, the "
            f"same arithmetic and layers without parameters, logits of the same weights within {logits:.1e} of "
            f"their scale, dropout alike; the loss trajectories are not checked for scripts")

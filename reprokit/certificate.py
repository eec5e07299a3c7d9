"""The equivalence certificate of one experiment, checked before any timing.

``certify`` runs ``python -m kits.certify`` in each framework's environment:
PyTorch first, exporting its freshly initialised weights in a framework-neutral
canonical form, then TensorFlow, loading them. It then compares what the two
wrote (kits/common/certificate.py holds the comparisons):

- ``layers``: per-layer canonical parameter shapes and counts (NCHW/OIHW mapped
  to NHWC/HWIO, the first dense layer's rows permuted to NHWC flatten order);
- ``flops``: training FLOPs per sample (forward and backward), each from its own
  framework's counter, compared on what both count (convolutions and matrix
  products), within ``flops_rtol``;
- ``logits``: the same initial weights on the first test samples, fp32 in
  evaluation mode as the kits run, and fp64 in evaluation and training mode,
  max abs difference within ``logits_atol``;
- ``loss_trajectory``: ten optimizer steps on the kit's first training batches,
  dropout off, the models, losses and optimizers rebuilt in float64 so that
  rounding neither hides nor fakes a difference; max relative difference
  within ``loss_rtol``. Declared optimizer differences that can be removed
  exactly (Adam's epsilon placement) are removed here and named;
- informational: the same ten steps in fp32 through each kit's own train_step
  (declared differences in effect), and how far the weights drifted apart.

Known semantic differences are listed in ``declared_differences`` next to the
spec's own, each with how the certificate handles it.

Default tolerances, from what was measured on the quick profiles (2 CPU cores):
fp32 logits agree to 2.1e-6 at most (VGG16 at width 0.125, 48x48); the fp64
trajectories to 1.8e-9 (quick SimpleCNN: BatchNorm in training mode amplifies
rounding about tenfold per step), 1.2e-12 (the tests' tiny SimpleCNN) and 4e-16
(VGG, Adam); the two FLOP counters agree exactly. ``loss_rtol`` 1e-6 leaves a
factor of 500 over the worst of these, while the smallest real differences
measured are 2.5e-7 (Keras's float32-rounded momentum, in fp64), 8e-4 (Adam's
epsilon placement) and 0.2 (BatchNorm epsilon 1e-3 against 1e-5).
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from kits.common import certificate as cert
from kits.common.files import write_json_atomic
from reprokit.errors import UserError
from reprokit.runners.base import KitCall

SCHEMA = "reprokit.certificate/1"
FRAMEWORKS = ("pytorch", "tensorflow")
DEFAULT_TOLERANCES = {"logits_atol": 1e-4, "loss_rtol": 1e-6, "flops_rtol": 1e-6}
TOLERANCE_MEANING = {
    "logits_atol": "max absolute difference of the logits of the same weights on the same batch",
    "loss_rtol": "max relative difference of the fp64 loss trajectory, step by step",
    "flops_rtol": "relative difference of the two counters' training FLOPs per sample",
}
TIMEOUT_S = 900
SIDE_NAME = "side.json"                 # what each side's kits.certify writes to its output folder
WEIGHTS_NAME = "initial-weights.npz"    # the PyTorch side's initial weights, read by the TensorFlow side
AFTER_NAME = "after-steps.npz"          # each side's fp64 weights after the steps


def validate_tolerances(tolerances: dict | None) -> dict:
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


def _check_inputs(specs: dict[str, dict], data_dir: Path) -> None:
    if set(specs) != set(FRAMEWORKS):
        raise UserError(f"the certificate compares {' and '.join(FRAMEWORKS)}; got specs for "
                        f"{', '.join(sorted(specs)) or 'none'}")
    for fw, spec in specs.items():
        if spec.get("framework") != fw:
            raise UserError(f"the spec given for {fw} is a {spec.get('framework')!r} spec")
    a, b = (specs[fw] for fw in FRAMEWORKS)
    if a.get("experiment") != b.get("experiment"):
        raise UserError(f"the two specs are of different experiments ({a.get('experiment')!r} and "
                        f"{b.get('experiment')!r}); a certificate compares one experiment")
    if a["data"].get("sha256") != b["data"].get("sha256"):
        raise UserError("the two specs name different prepared datasets; plan both frameworks from the same data")
    if not Path(data_dir).is_dir():
        raise UserError(f"the data directory {data_dir} does not exist; prepare the data before certifying")


def spec_differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Fields of the model, data, train and numerics sections where two RunSpecs differ."""
    out = []
    keys = ("model", "data", "train", "numerics", "pitfalls") if not prefix else sorted(set(a) | set(b))
    for key in keys:
        x, y = a.get(key), b.get(key)
        name = f"{prefix}{key}"
        if isinstance(x, dict) and isinstance(y, dict):
            out += spec_differences(x, y, name + ".")
        elif x != y and not (name == "data.file" or name.startswith("data.sha")):
            out.append(f"{name}: PyTorch {x!r}, TensorFlow {y!r}")
    return out


def _run_side(fw: str, runner, spec: dict, work: Path, timeout_s: float, extra: list[str | Path],
              inputs: tuple[Path, ...] = ()) -> tuple[dict | None, str, dict]:
    """One side's ``python -m kits.certify`` through the runner: (its findings or None, log tail, launcher)."""
    spec_path = work / f"spec-{fw}.json"
    spec_path.write_text(json.dumps(spec))
    out = work / fw
    call = KitCall(fw, "kits.certify", ("--spec", spec_path, "--data-dir", runner.data_dir,
                                        "--out", out / SIDE_NAME, *extra),
                   output=out, inputs=(spec_path, *inputs), timeout_s=timeout_s, label=f"certify-{fw}")
    outcome = runner.run(call, lambda event: None)
    if outcome.interrupted:
        raise KeyboardInterrupt
    tail = "\n".join(outcome.log_tail[-15:])
    if outcome.timed_out:
        return None, f"the {cert.label(fw)} certificate did not finish within {timeout_s:.0f} s", outcome.launcher
    try:
        side = json.loads((out / SIDE_NAME).read_text())
    except (OSError, json.JSONDecodeError):
        return None, (f"the {cert.label(fw)} certificate exited with {outcome.exit_code} and wrote no readable "
                      f"{SIDE_NAME}:\n{tail}"), outcome.launcher
    return side, tail, outcome.launcher


def _known_differences(spec: dict) -> list[dict]:
    """Semantic differences between the frameworks that this experiment's settings touch."""
    model, opt = spec["model"], spec["train"]["optimizer"]
    out = [{"field": "data layout", "pytorch": "NCHW", "tensorflow": "NHWC",
            "why": "each framework's native layout for convolutions",
            "handled": "weights move between OIHW/(out, in) and HWIO/(in, out); the PyTorch kit transposes its "
                       "NHWC batches once on the device"},
           {"field": "execution", "pytorch": "eager", "tensorflow": "tf.function graph (no XLA)",
            "why": "the idiomatic fast path of each framework",
            "handled": "the certificate's steps run the same way; no effect beyond rounding"}]
    if opt["name"] == "adam":
        out.append({"field": "Adam epsilon placement",
                    "pytorch": "lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)",
                    "tensorflow": "lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)",
                    "why": f"Keras's eps acts as eps / sqrt(1 - beta2^t) in PyTorch's formula: "
                           f"{1 / math.sqrt(1 - opt['beta2']):.1f}x at step 1, fading with t; the same eps "
                           f"({opt['epsilon']:g}) is declared for both",
                    "handled": "removed from the certified fp64 trajectory (PyTorch's eps set step by step); in "
                               "effect in the fp32 trajectory, whose distance it sets"})
    elif opt.get("momentum"):
        out.append({"field": "SGD momentum form",
                    "pytorch": "v = m*v + g; p -= lr*v",
                    "tensorflow": "v = m*v - lr*g; p += v",
                    "why": "identical while the learning rate is constant, as it is in the certificate's steps; "
                           "they part when a scheduler changes lr (the PyTorch side's ReduceLROnPlateau pitfall)",
                    "handled": "checked: the fp64 trajectory compares the two forms (PyTorch given Keras's "
                               "float32-rounded momentum, see neutralised)"})
    if model["name"] == "simplecnn":
        bn = model["batchnorm"]
        out.append({"field": "BatchNorm momentum convention",
                    "pytorch": f"running = (1 - momentum) * running + momentum * batch, momentum = {1 - bn['momentum_keep']:g}",
                    "tensorflow": f"moving = momentum * moving + (1 - momentum) * batch, momentum = {bn['momentum_keep']:g}",
                    "why": "opposite conventions for the same update",
                    "handled": "mapped by both kits from one spec value, model.batchnorm.momentum_keep"})
        out.append({"field": "BatchNorm running variance",
                    "pytorch": "updated with the unbiased batch variance (times n / (n - 1))",
                    "tensorflow": "updated with the biased batch variance",
                    "why": "both normalise with the biased variance in training; only the running statistics "
                           "used in evaluation differ, by n / (n - 1) per update (n = batch x height x width)",
                    "handled": "not removable; shows in the moving variance after the steps (informational)"})
        out.append({"field": "BatchNorm epsilon default",
                    "pytorch": "1e-5", "tensorflow": "1e-3",
                    "why": "different defaults",
                    "handled": f"both set from the spec, model.batchnorm.epsilon = {bn['epsilon']:g}"})
    init = model.get("init")
    if init is None:
        out.append({"field": "initializers", "pytorch": "the user's builder", "tensorflow": "the user's builder",
                    "why": "a custom model initialises itself",
                    "handled": "the certificate loads PyTorch's initial weights into TensorFlow"})
    else:
        out.append({"field": "initializers",
                    "pytorch": f"{init['conv']} / {init['dense']} via nn.init (kaiming_uniform_(relu) = he_uniform, "
                               f"xavier_uniform_ = glorot_uniform), bias zeros; not PyTorch's default "
                               f"kaiming_uniform_(a=sqrt(5))",
                    "tensorflow": f"{init['conv']} / {init['dense']}, bias {init['bias']}",
                    "why": "the same distributions from different random streams: the timed runs start from "
                           "different draws",
                    "handled": "the certificate loads PyTorch's initial weights into TensorFlow"})
    out.append({"field": "padding rules",
                "pytorch": "Conv2d(3, padding=1), MaxPool2d(2, 2) (floor)",
                "tensorflow": "Conv2D(3, padding='same'), MaxPooling2D(2, 2) ('valid')",
                "why": "identical for 3x3 stride-1 convolutions and 2x2 stride-2 pooling; 'same' pads more at the "
                       "bottom and right for even kernels or strides above 1, which these models do not use",
                "handled": "checked by the logits of the same weights"})
    if model["name"] == "vgg16":
        out.append({"field": "flatten order",
                    "pytorch": "NCHW feature map flattened as (c, h, w)",
                    "tensorflow": "NHWC feature map flattened as (h, w, c)",
                    "why": "the first dense layer sees the same numbers in another order",
                    "handled": "its rows are permuted when weights move between the frameworks"})
    out.append({"field": "dropout masks",
                "pytorch": "torch's random stream", "tensorflow": "Keras's seed generator",
                "why": "the timed runs drop different units",
                "handled": "every Dropout rate is 0 in the certificate; it says nothing about dropout"})
    return out


def _declared(specs: dict[str, dict]) -> list[dict]:
    spec = specs["pytorch"]
    own: list[dict] = []
    for s in (specs["pytorch"], specs["tensorflow"]):
        for d in s.get("differences", []):
            if d not in own:
                own.append(d)
    fields = {d["field"].lower() for d in own}
    known = [{**d, "source": "certificate"} for d in _known_differences(spec) if d["field"].lower() not in fields]
    by_field = {d["field"].lower(): d for d in _known_differences(spec)}
    declared = [{**d, "source": "spec", **({"handled": by_field[d["field"].lower()]["handled"]}
                                          if d["field"].lower() in by_field else {})} for d in own]
    return declared + known


def _skipped(name: str, reason: str) -> dict:
    return {"name": name, "passed": None, "skipped": reason, "evidence": f"skipped: {reason}"}


def _weights_after(work: Path) -> dict | None:
    try:
        return {fw: dict(np.load(work / fw / AFTER_NAME)) for fw in FRAMEWORKS}
    except (OSError, ValueError):
        return None


def _summary(status: str, checks: list[dict], message: str | None) -> str:
    """One sentence for the report's banner; the checks carry the numbers."""
    if status == "error":
        return f"no certificate: {message}"
    by = {c["name"]: c for c in checks}
    failed = [c for c in checks if c["passed"] is False]
    if failed:
        return "NOT equivalent: " + "; ".join(
            (c.get("mismatches") or [c["evidence"]])[0] if c["name"] == "layers" else f"{c['name']}: {c['evidence']}"
            for c in failed)
    n = by["layers"]["numbers"]["parameters"]["pytorch"]
    flops = by["flops"]["numbers"]["per_sample"]["pytorch"]
    logits = max(v["max_abs_diff"] for v in by["logits"]["numbers"].values())
    loss = by["loss_trajectory"]["numbers"]["max_relative_difference"]
    return (f"equivalent within the declared tolerances: the same {n:,} parameters layer by layer, "
            f"{flops:,.0f} training FLOPs per sample by both counters, logits within {logits:.1e}, "
            f"fp64 loss trajectory within {loss:.1e} (relative)")


def certify(spec_by_framework: dict[str, dict], runner, work_dir: Path, tolerances: dict | None = None,
            timeout_s: float = TIMEOUT_S) -> dict:
    """Certify that the two frameworks' runs of one experiment compute the same thing.

    Both sides run through ``runner`` (reprokit.runners.base.Runner), the one the timed runs use:
    in Docker the PyTorch container writes the initial weights to its output folder and the
    TensorFlow container reads them read-only. The certificate records what each side ran on
    (``runner.describe``: lock hash, image) beside the launcher's facts.

    Returns (and writes to ``work_dir/certificate.json``) {"schema", "experiment", "profile",
    "variant", "status": "pass"|"fail"|"error", "summary", "message", "checks": [{"name",
    "passed": True|False|None, "evidence", "numbers"?, "skipped"?}], "declared_differences",
    "neutralised", "spec_differences", "tolerances", "setup", "frameworks", "wall_s"}.
    Bad input (a tolerance that is not a positive number, specs of two experiments, a missing
    interpreter) raises UserError before anything runs.
    """
    t0 = time.perf_counter()
    tol = validate_tolerances(tolerances)
    _check_inputs(spec_by_framework, runner.data_dir)
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    specs = spec_by_framework
    result = {"schema": SCHEMA, "experiment": specs["pytorch"]["experiment"],
              "profile": specs["pytorch"].get("profile"),
              "variant": {fw: specs[fw].get("variant") for fw in FRAMEWORKS},
              "pitfalls": {fw: specs[fw].get("pitfalls", []) for fw in FRAMEWORKS},
              "status": "error", "summary": "", "message": None, "checks": [],
              "declared_differences": _declared(specs), "neutralised": [],
              "spec_differences": spec_differences(specs["pytorch"], specs["tensorflow"]),
              "tolerances": {k: {"value": v, "meaning": TOLERANCE_MEANING[k]} for k, v in tol.items()},
              "setup": None, "frameworks": {},
              "ran_on": {fw: {**runner.describe(fw), "backend": runner.name} for fw in FRAMEWORKS}}
    weights = work / "pytorch" / WEIGHTS_NAME
    sides: dict[str, dict] = {}
    for fw, extra, inputs in (("pytorch", ["--weights-out", weights], ()),
                              ("tensorflow", ["--weights-in", weights], (weights,))):
        side, tail, launcher = _run_side(fw, runner, specs[fw], work, timeout_s,
                                         [*extra, "--weights-after-out", work / fw / AFTER_NAME], inputs)
        result["ran_on"][fw]["image_id"] = (launcher.get("image") or {}).get("id")
        if side is None or side.get("status") in ("failed", "unmappable") or "layers" not in side:
            what = side.get("message") if side else tail
            kind = "has no canonical form" if side and side.get("status") == "unmappable" else "failed"
            result["message"] = (f"the {cert.label(fw)} side {kind}: {what}" if side else what)
            return _finish(result, work, t0)
        sides[fw] = side
        result["frameworks"][fw] = side.get("environment", {})
    pt, tf = sides["pytorch"], sides["tensorflow"]
    result["setup"] = pt.get("setup")
    result["neutralised"] = pt.get("neutralised", []) + tf.get("neutralised", [])
    checks = result["checks"]
    layers = cert.compare_layers({"pytorch": pt["layers"], "tensorflow": tf["layers"]})
    checks.append(layers)
    checks.append(cert.compare_flops({"pytorch": pt["flops"], "tensorflow": tf["flops"]}, tol["flops_rtol"]))
    if not layers["mapped"]:
        reason = ("the two models have different parameters, so one set of weights cannot be loaded into both "
                  "(the same initial weights are what the logits and the trajectory compare)")
        checks += [_skipped("logits", reason), _skipped("loss_trajectory", reason)]
    elif tf.get("status") != "ok":
        result["message"] = f"the TensorFlow side refused the PyTorch weights: {tf.get('message')}"
        return _finish(result, work, t0)
    else:
        setup = pt["setup"]
        checks.append(cert.compare_logits({"pytorch": pt["logits"], "tensorflow": tf["logits"]}, tol["logits_atol"]))
        removed = ", ".join(d["field"] for d in result["neutralised"])
        checks.append(cert.compare_losses(
            {"pytorch": pt["losses"]["fp64"], "tensorflow": tf["losses"]["fp64"]}, tol["loss_rtol"],
            f"fp64, batches of {setup['step_batch_size']} in the kit's order, dropout 0"
            + (f", removed: {removed}" if removed else "") + "; the last point is batch 1 again after the last step"))
        checks.append(cert.compare_losses(
            {"pytorch": pt["losses"]["fp32"], "tensorflow": tf["losses"]["fp32"]}, None,
            "fp32 through each kit's own train_step, declared differences in effect, rounding amplified by "
            "training", name="loss_trajectory_fp32"))
        after = _weights_after(work)
        if after:
            checks.append(cert.compare_after_steps(after))
    result["status"] = "fail" if any(c["passed"] is False for c in checks) else "pass"
    return _finish(result, work, t0)


def _finish(result: dict, work: Path, t0: float) -> dict:
    result["summary"] = _summary(result["status"], result["checks"], result["message"])
    result["wall_s"] = time.perf_counter() - t0
    write_json_atomic(work / "certificate.json", result)
    return result

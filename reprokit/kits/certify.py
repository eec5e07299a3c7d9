"""One framework's half of the equivalence certificate, checked before any timing.

    python -m reprokit.kits.certify --spec SPEC.json --data-dir DIR --out OUT.json
                           [--weights-in W.npz | --weights-out W.npz] [--weights-after-out A.npz]
    python -m reprokit.kits.certify --jobs JOBS.json --out-dir OUT --data-dir DIR [--weights-from IN]

--jobs certifies several experiments in one process. JOBS.json is a list of {"name", "spec"}, the
spec's path relative to JOBS.json's folder (so the list holds no path of the machine that wrote it),
and optionally "parts": "structure", which stops a job after the fp32 logits (the host certifies
the dropout passes and the trajectories of a model too large for them at a reduced width), and "steps",
which replaces --steps for that job. As each job ends it prints a progress line
(reprokit/kits/training_loop/progress.py): the job, how many are done of how many, its seconds and how it ended.
Job NAME writes OUT/NAME/side.json and OUT/NAME/after-steps.npz, and OUT/NAME/layer-outputs.npz and
gradients.npz (reprokit/kits/framework_free/parting.py); it exports its initial weights to OUT/NAME/initial-weights.npz,
or with --weights-from starts from IN/NAME/initial-weights.npz.
``--steps N`` shortens the trajectories (default 10) and ``--dropout-passes N`` the dropout check
(default 128), for timing a large model.

Builds the spec's model, optimizer and loss exactly as the kit trains them (the framework's
Backend) and writes to OUT, in a canonical framework-neutral form (reprokit/kits/framework_free/certificate.py):

- ``optimizer``: the optimizer the kit built, read back from the object;
- ``layers``: per-layer parameter names, canonical shapes and counts;
- ``ops``, ``flops``: the canonical convolutions and matrix products of one traced forward pass
  with the layers without parameters between them, and the training FLOPs per sample they make
  (reprokit/kits/framework_free/arithmetic.py);
- ``outputs``: the shape of the model's outputs and whether they are probabilities;
- ``logits``: the first test samples through the kit's own preprocessing, fp32 in evaluation
  mode, and fp64 in evaluation and training mode (dropout off);
- ``train_outputs``: fp32 training-mode outputs of the same weights over many passes, dropout on;
- ``losses``: ``fp32``, ten steps of the kit's own train_step on its first training batches
  (epoch 1's order, then epoch 2's), and ``fp32_perturbed``, the same with the inputs one float32
  ulp up; ``fp64``, the same ten steps through the certificate's reference step (the kit's model,
  loss and optimizer rebuilt in float64: the certified trajectory), plus the loss of batch 1 after
  them, ``fp64_ulp_apart``, the same steps from the weights each one float64 ulp apart, in random
  directions (``cert.ULP_BASELINES`` draw(s), each with a fresh model and optimizer), and ``fp32_reference``,
  that reference step in fp32. Declared optimizer differences listed
  in ``neutralised`` are removed in all of them;
- ``layer_outputs``: every layer's output in fp64, evaluation mode, on the first samples of the fixed batch
  (values in layer-outputs.npz), and ``gradients``: each fp64 reference step's canonical gradients
  (gradients.npz), from which the host names where the two models part.

With --weights-out it first exports its freshly initialised weights; with
--weights-in it starts from such a file instead, and refuses one that does not
fit the model. --weights-after-out saves the fp64 weights after the steps.

Exit status: 0 done; 2 refused (weights that do not fit, a model with no canonical form, a user's
model that cannot run as the experiment says, an unreadable spec, missing or too little data), with
one sentence on stderr and in OUT; 1 any other failure, with the traceback's tail in OUT. OUT is
written in every case. With --jobs, the worst of the jobs' statuses.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from reprokit.kits.contract.files import write_json_atomic
from reprokit.kits.contract.names import FRAMEWORKS
from reprokit.kits.contract.spec import RunSpec
from reprokit.kits.framework_free import arithmetic, custom, model_call, model_checks, parting
from reprokit.kits.framework_free import certificate as cert
from reprokit.kits.framework_free import data as datalib
from reprokit.kits.parts import CanonicalModel, CapturedSide, CertifySide, certifier
from reprokit.kits.training_loop.progress import Progress


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m reprokit.kits.certify", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, help="resolved RunSpec (JSON)")
    parser.add_argument("--jobs", type=Path, help="a JSON list of certificates to make in this process")
    parser.add_argument("--out-dir", type=Path, help="with --jobs: the folder each job writes its own folder in")
    parser.add_argument("--weights-from", type=Path, help="with --jobs: the --out-dir of the run that exported "
                                                          "the initial weights")
    parser.add_argument("--data-dir", required=True, type=Path, help="folder with the prepared dataset")
    parser.add_argument("--out", type=Path, help="where to write this side's findings (JSON)")
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument("--weights-in", type=Path,
                         help="canonical .npz to load instead of this kit's own initialisation")
    weights.add_argument("--weights-out", type=Path, help="export this kit's initial weights to this canonical .npz")
    parser.add_argument("--weights-after-out", type=Path, help="export the weights after the optimizer steps here")
    parser.add_argument("--steps", type=int, default=cert.STEPS, help="optimizer steps of the trajectories")
    parser.add_argument("--dropout-passes", type=int, default=cert.DROPOUT_PASSES,
                        help="training-mode passes of the dropout check")
    args = parser.parse_args(argv)
    if (args.jobs is None) == (args.spec is None) or (args.spec is not None and args.out is None) or (
            args.jobs is not None and args.out_dir is None):
        parser.error("give either --spec and --out, or --jobs and --out-dir")
    if args.jobs is not None and (args.out or args.weights_in or args.weights_out or args.weights_after_out):
        parser.error("with --jobs, each job's files are in --out-dir (and --weights-from)")
    if args.jobs is None and (args.out_dir or args.weights_from):
        parser.error("--out-dir and --weights-from go with --jobs")
    if args.steps < 1 or args.dropout_passes < 2:
        parser.error("--steps must be at least 1 and --dropout-passes at least 2")
    return args


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def certify(spec: RunSpec, data_dir: Path, out: dict, folder: Path, weights_in: Path | None = None,
            weights_out: Path | None = None, weights_after_out: Path | None = None,
            steps: int = cert.STEPS, dropout_passes: int = cert.DROPOUT_PASSES, parts: str = "all") -> dict:
    """Fill ``out`` step by step, so that a refusal still carries what was found before it. ``folder`` (beside
    side.json) gets the fp64 layer outputs and gradients (reprokit/kits/framework_free/parting.py).

    ``parts`` "structure" stops after the fp32 logits: what the host asks of a model too large for
    the dropout passes and the trajectories, which it certifies again at a declared reduced width."""
    t0 = time.perf_counter()
    d = spec.data
    assert d.file is not None and d.sha256 is not None      # the host prepared the data before planning the spec
    arrays = datalib.load(data_dir / d.file, d.sha256, d.train_samples, d.test_samples)
    x, y = cert.fixed_batch(arrays)
    batches = cert.step_batches(spec, arrays, steps)
    clock = _Clock(out)
    side = certifier(spec, arrays, x[:cert.TRACE_BATCH])
    clock("build and trace")
    try:
        _certify(side, spec, out, x, batches, weights_in, weights_out, weights_after_out, dropout_passes, clock,
                 parts, folder)
    finally:
        side.reset()
    out["wall_s"] = time.perf_counter() - t0
    return out


class _Clock:
    """Wall and CPU seconds of each part, into out["seconds"], so a certificate's cost can be read by check."""

    def __init__(self, out: dict) -> None:
        self.out = out.setdefault("seconds", {})
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def __call__(self, part: str) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.out[part] = {"wall": round(wall - self.wall, 3), "cpu": round(cpu - self.cpu, 3)}
        self.wall, self.cpu = wall, cpu


def _layer_settings(side: CanonicalModel, out: dict, x) -> None:
    """Every layer's settings as built (its own weights, one sample in evaluation mode): what the normalisation
    check compares, also where the two models cannot share weights."""
    try:
        out["layer_settings"] = [entry for entry, _ in side.layer_outputs(x[:1], training=False)]
    except Exception as exc:           # a layer the recording cannot read: the checks go on without it
        out["layer_settings_error"] = f"{type(exc).__name__}: {custom.one_line(exc)}"


def _certify(side: CertifySide, spec, out, x, batches, weights_in, weights_out, weights_after_out, dropout_passes,
             clock, parts: str, folder: Path) -> None:
    _canonical(side, out)
    _layer_settings(side, out, x)
    n_drop = min(cert.DROPOUT_SAMPLES, len(x))
    out["setup"] = {"logits_samples": len(x), "steps": len(batches), "step_batch_size": len(batches[0][1]),
                    "configured_batch_size": spec.train.batch_size, "trace_batch": min(cert.TRACE_BATCH, len(x)),
                    "dropout": f"on in the trace and in {dropout_passes} training-mode passes on {n_drop} samples "
                               f"(fp32); off everywhere else",
                    "batchnorm": "training mode (batch statistics) in the steps",
                    "precision": "fp32 as the kit runs for the trace, logits, dropout passes and the kit's own "
                                 "steps; the same model, loss and optimizer rebuilt in fp64 for the certified "
                                 "trajectory"}
    # What the model returns, on its own initial weights: a shape the kit's loss cannot take stops here.
    logits = side.logits(x, training=False)
    out["outputs"] = _outputs(side, logits, len(x), spec.model.num_classes)
    refusal = model_checks.check_outputs(spec.framework, out["outputs"])
    shape = out["outputs"]["shape"]
    if refusal and (len(shape) != 2 or shape[0] != len(x) or shape[1] < spec.model.num_classes):
        raise custom.BadModel(refusal)
    initial = _same_weights(side, out, x, weights_in, weights_out, f"initialised by the {spec.framework} kit")
    clock("outputs and fp32 logits")
    if parts == "structure":
        return
    side.load(initial)
    out["train_outputs"] = side.train_outputs(x[:n_drop], dropout_passes)
    clock(f"dropout: {dropout_passes} training-mode passes")
    # Declared optimizer differences that one side can remove exactly are removed from every trajectory.
    out["neutralised"] = side.neutralisable()
    out["losses"] = {}
    for key, perturb in (("fp32", False), ("fp32_perturbed", True), ("fp32_reference", None)):
        side._build()                           # a fresh optimizer each time
        side.dropout_off()
        side.load(initial)
        out["losses"][key] = (side.train_losses(batches) if perturb is None
                              else side.kit_train_losses(batches, perturb=perturb))
        clock(f"trajectory {key}: {len(batches)} steps")
    # fp64: the same builder, loss and optimizer, so rounding cannot hide or fake a difference.
    side.use_float64()
    side.load(initial)
    out["logits"]["fp64"] = {"eval": side.logits(x, training=False), "train": side.logits(x, training=True)}
    side.load(initial)                       # undo the running-statistics update of the training-mode pass
    clock("fp64: rebuild and logits")
    _record_layers(side, out, x, folder, "fp64")
    side.load(initial)                       # undo the training-mode pass's running statistics
    clock("fp64: layer outputs")
    gradients: list = []
    losses = side.train_losses(batches, gradients)
    out["gradients"] = parting.save_gradients(folder, gradients)
    if weights_after_out:
        cert.save_weights(weights_after_out, side.export())
    losses.append(side.training_loss(*batches[0]))
    out["losses"]["fp64"] = losses
    clock(f"fp64: trajectory of {len(batches)} steps, gradients recorded")
    # The same steps from weights one float64 ulp apart: how far rounding alone carries this trajectory. A deep
    # network with BatchNorm in training mode amplifies it by orders of magnitude per step (ResNet-50 at an
    # eighth of its width: 1e-15 to 1e-2 in ten steps, in one framework), which the host then allows for.
    ulp_apart = []
    for draw in range(cert.ULP_BASELINES):
        side.use_float64()                      # a fresh model, optimizer and step count
        side.load(cert.ulp_apart(initial, seed=draw))
        ulp_apart.append([*side.train_losses(batches), side.training_loss(*batches[0])])
    out["losses"]["fp64_ulp_apart"] = ulp_apart
    clock(f"fp64: {cert.ULP_BASELINES} trajectory(ies) from weights one float64 ulp apart")


def _record_layers(side: CanonicalModel, out: dict, x, folder: Path, precision: str) -> None:
    """Every layer's output on the first samples of the fixed batch, from the weights loaded now, into
    folder (reprokit/kits/framework_free/parting.py): where the two models part, if they do."""
    n = min(parting.RECORD_SAMPLES, len(x))
    try:
        modes = parting.save_outputs(folder, {"eval": side.layer_outputs(x[:n], training=False),
                                              "train": side.layer_outputs(x[:n], training=True)})
    except Exception as exc:           # a layer the recording cannot read: the checks go on without it
        out["layer_outputs_error"] = f"{type(exc).__name__}: {custom.one_line(exc)}"
        return
    out["layer_outputs"] = {"precision": precision, "samples": n, "dropout": "off", "file": parting.OUTPUTS_NAME,
                            "modes": modes}


def _canonical(side: CanonicalModel, out: dict) -> None:
    """What the side's model is, from the object: its optimizer, parameters and arithmetic."""
    out["environment"] = side.environment()
    out["optimizer"] = side.optimizer
    out["layers"] = side.records()
    out["ops"] = side.trace.ops
    out["flops"] = arithmetic.flops(side.trace.ops)


def _same_weights(side: CanonicalModel, out: dict, x, weights_in: Path | None, weights_out: Path | None,
                  source: str) -> dict:
    """The initial weights both sides start from (exported by one, loaded by the other), and the fp32 logits
    of the fixed batch in evaluation mode from them."""
    initial = side.export()
    if weights_out:
        cert.save_weights(weights_out, initial)
        out["weights"] = {"source": source, "file": str(weights_out), "sha256": _sha256(weights_out)}
    if weights_in:
        initial = cert.load_weights(weights_in, out["layers"])
        out["weights"] = {"source": "loaded", "file": str(weights_in), "sha256": _sha256(weights_in)}
    side.load(initial)
    out["logits"] = {"fp32": {"eval": side.logits(x, training=False)}}
    return initial


def certify_captured(side: CapturedSide, out: dict, classes: int, device: str, weights_in: Path | None = None,
                     weights_out: Path | None = None, folder: Path | None = None) -> dict:
    """The certificate's checks on a model a script trains (a ``Captured`` side, at the script's first step):
    what it is, what it returns, and its fp32 outputs from the same weights in both, in evaluation mode and
    over many training-mode passes, and into ``folder`` every layer's (fp32: a captured model is not rebuilt).
    The trajectories need the scripts' own loss and optimizer replayed in fp64, which is not done here (the
    host names them as not checked)."""
    x = side.x_first
    out["call"] = side.call.describe()
    _canonical(side, out)
    _layer_settings(side, out, x)
    out["shared"] = side.shared()
    out["modes"] = side.modes()
    n_drop = min(cert.DROPOUT_SAMPLES, len(x))
    per_pass = n_drop * max(out["flops"]["forward"], 1)
    dropout_passes = int(min(cert.DROPOUT_PASSES, max(cert.MIN_PASSES, cert.PASSES_BUDGET_FLOPS[device] // per_pass)))
    out["setup"] = {"logits_samples": len(x), "trace_batch": len(side.x_trace),
                    "inputs": "the first samples of the batch the PyTorch script's model received at its first step, "
                              "as the script prepared them",
                    "dropout": f"on in the trace and in {dropout_passes} training-mode passes on {n_drop} samples "
                               f"(fp32; {cert.DROPOUT_PASSES} where they cost under "
                               f"{cert.PASSES_BUDGET_FLOPS[device]:.0e} FLOPs on a {device.upper()}); off in the "
                               f"logits, in evaluation and in training mode; each framework draws its own masks, so "
                               f"the passes compare dropout by its distribution, not mask for mask",
                    "calls": "each model called as its script called it at its first step, the certificate's batch "
                             "in place of the script's: its other arrays the script's own, its random-number objects "
                             "by value, its flags as given; compared at the part of its output its loss read",
                    "modes": "training mode is each model's mode, or training argument, as its script trained it",
                    "precision": "fp32, as the scripts ran"}
    out["outputs"] = _outputs(side, side.logits(x, training=False), len(x), classes)
    try:
        initial = _same_weights(side, out, x, weights_in, weights_out, f"the {side.framework} script's own "
                                                                        f"initialisation, captured at its first step")
    except cert.WeightsMismatch as exc:      # other layers: what the model is was still found, and is compared
        out["weights"] = {"source": "refused", "message": str(exc)}
        return out
    side.load(initial)
    out["train_outputs"] = side.train_outputs(x[:n_drop], dropout_passes)
    # Training mode without dropout (batch statistics where BatchNorm trains): what the steps compute.
    side.dropout_off()
    side.load(initial)
    out["logits"]["fp32"]["train"] = side.logits(x, training=True)
    if folder is not None:
        side.load(initial)
        _record_layers(side, out, x, folder, "fp32")
    side.load(initial)
    return out


def _outputs(side: CanonicalModel, logits: list, n: int, classes: int) -> dict:
    arr = np.asarray(logits, np.float64)
    probabilities = bool(arr.ndim == 2 and np.all(arr >= 0) and np.allclose(arr.sum(axis=1), 1.0, atol=1e-4))
    # log_softmax's rows (what PyTorch's nll_loss takes): non-positive, their exponentials sum to 1
    log_probabilities = bool(arr.ndim == 2 and np.all(arr <= 0)
                             and np.allclose(np.exp(arr).sum(axis=1), 1.0, atol=1e-4))
    return {"builder": side.who, "last_layer": side.last_layer(), "shape": list(arr.shape),
            "expected": [n, classes], "expects_logits": side.expects_logits(),
            "probabilities": probabilities, "log_probabilities": log_probabilities}


def _run_job(spec_path: Path, data_dir: Path, out_path: Path, weights_in=None, weights_out=None,
             weights_after_out=None, steps: int = cert.STEPS, dropout_passes: int = cert.DROPOUT_PASSES,
             parts: str = "all") -> int:
    try:
        spec = RunSpec.from_dict(json.loads(Path(spec_path).read_text()))
        framework = spec.framework
        if framework not in FRAMEWORKS:
            raise ValueError(f"framework {framework!r} is not one of {', '.join(FRAMEWORKS)}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        message = f"{spec_path} is not a readable RunSpec: {exc}"
        write_json_atomic(out_path, {"schema": cert.SIDE_SCHEMA, "status": "failed", "message": message})
        print(message, file=sys.stderr)
        return 2
    out = {"schema": cert.SIDE_SCHEMA, "framework": framework, "experiment": spec.experiment,
           "variant": spec.variant, "profile": spec.profile, "pitfalls": spec.pitfalls.names(),
           "run_id": spec.run_id, "status": "ok", "message": None}
    code = guarded(out, lambda: certify(spec, data_dir, out, Path(out_path).parent, _path(weights_in),
                                        _path(weights_out), _path(weights_after_out), steps, dropout_passes, parts))
    write_json_atomic(out_path, out)
    if code == 2:
        print(out["message"], file=sys.stderr)
    return code


def guarded(out: dict, work) -> int:
    """``work()``, which fills ``out``; a refusal or a failure becomes out's status and message, so that what
    was found before it stays. Returns the exit status: 0 done, 2 refused (one sentence), 1 failed."""
    try:
        work()
        return 0
    except cert.UnmappableModel as exc:
        out.update(status="unmappable", message=str(exc))
    except (cert.NotCaptured, model_call.Unreplayable) as exc:
        out.update(status="not-run", message=str(exc))
    except custom.BadModel as exc:
        out.update(status="bad-model", message=str(exc))
    except cert.WeightsMismatch as exc:
        out.update(status="refused", message=str(exc))
    except (datalib.DataError, cert.InputError) as exc:
        out.update(status="failed", message=str(exc))
    except (Exception, SystemExit) as exc:     # a failed certificate still leaves its file
        tail = traceback.format_exc().splitlines()[-30:]
        out.update(status="failed", message=f"{type(exc).__name__}: {exc}", log_tail=tail)
        print("\n".join(tail), file=sys.stderr)
        return 1
    return 2


def _path(p) -> Path | None:
    return Path(p) if p else None


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.spec is not None:
        return _run_job(args.spec, args.data_dir, args.out, args.weights_in, args.weights_out,
                        args.weights_after_out, args.steps, args.dropout_passes)
    try:
        jobs = json.loads(args.jobs.read_text())
        if not isinstance(jobs, list) or not all(isinstance(j, dict) and {"name", "spec"} <= set(j) for j in jobs):
            raise ValueError("it must be a list of objects with the keys name and spec")
    except (OSError, ValueError) as exc:
        print(f"{args.jobs} is not a readable list of certificate jobs: {exc}", file=sys.stderr)
        return 2
    codes = []
    progress = Progress(min_interval_s=0)
    for done, job in enumerate(jobs, 1):
        t0 = time.perf_counter()
        out = args.out_dir / job["name"]
        out.mkdir(parents=True, exist_ok=True)
        weights_in = args.weights_from / job["name"] / cert.WEIGHTS_NAME if args.weights_from else None
        codes.append(_run_job(args.jobs.parent / job["spec"], args.data_dir, out / cert.SIDE_NAME, weights_in,
                              None if weights_in else out / cert.WEIGHTS_NAME, out / cert.AFTER_NAME,
                              job.get("steps", args.steps), args.dropout_passes, job.get("parts", "all")))
        # the host names the job, its seconds and how many are left as each ends, not only when the process does
        progress.emit(force=True, phase="certificate", job=job["name"], done=done, of=len(jobs),
                      seconds=round(time.perf_counter() - t0, 1), status=_STATUS[codes[-1]])
    return max(codes, default=0)


_STATUS = {0: "done", 1: "failed", 2: "stopped (refused or a bad model)"}


if __name__ == "__main__":
    # Before a framework loads its OpenMP runtime, which reads this once: a thread waiting for the others
    # sleeps instead of spinning. The certificate compares numbers, not speed (the same threads and kernels
    # either way), and on a busy machine threads spinning for a descheduled peer made the PyTorch side of the
    # quick matrix's four jobs 73 s and 267 s against 26 s and 30 s (2 cores, load 3 to 4). A timed run
    # (reprokit/kits/run.py) keeps the framework's own policy.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    code = main()
    # The files are on disk: skip the frameworks' slow interpreter teardown (about a second).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

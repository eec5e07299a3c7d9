"""One framework's half of the equivalence certificate, checked before any timing.

    python -m kits.certify --spec SPEC.json --data-dir DIR --out OUT.json
                           [--weights-in W.npz | --weights-out W.npz] [--weights-after-out A.npz]

Builds the spec's model, optimizer and loss exactly as the kit trains them (the
framework's Backend), sets every Dropout rate to 0, and writes to OUT, in a
canonical framework-neutral form (kits/common/certificate.py):

- ``layers``: per-layer parameter names, canonical shapes and counts;
- ``flops``: training FLOPs per sample (forward and backward) from this
  framework's own counter, with the conventions it counts by;
- ``logits``: the first test samples through the kit's own preprocessing, fp32
  in evaluation mode, and fp64 in evaluation and training mode;
- ``losses``: ``fp32``, ten steps of the kit's own train_step on its first
  training batches (epoch 1's order, then epoch 2's); ``fp64``, the same ten
  steps with the same model, loss and optimizer rebuilt in float64 (the
  certified trajectory; declared optimizer differences listed in
  ``neutralised`` are removed there), plus the loss of batch 1 after them.

With --weights-out it first exports its freshly initialised weights; with
--weights-in it starts from such a file instead, and refuses one that does not
fit the model. --weights-after-out saves the fp64 weights after the steps.

Exit status: 0 done; 2 refused (weights that do not fit, a model with no
canonical form, an unreadable spec, missing or too little data), with one sentence on stderr and in OUT;
1 any other failure, with the traceback's tail in OUT. OUT is written in every case.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

from kits.common import certificate as cert
from kits.common import data as datalib
from kits.common.files import write_json_atomic

SIDES = {"pytorch": "kits.pytorch_kit.certify", "tensorflow": "kits.tensorflow_kit.certify"}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m kits.certify", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path, help="resolved RunSpec (JSON)")
    parser.add_argument("--data-dir", required=True, type=Path, help="folder with the prepared dataset")
    parser.add_argument("--out", required=True, type=Path, help="where to write this side's findings (JSON)")
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument("--weights-in", type=Path, help="canonical .npz to load instead of this kit's own initialisation")
    weights.add_argument("--weights-out", type=Path, help="export this kit's initial weights to this canonical .npz")
    parser.add_argument("--weights-after-out", type=Path, help="export the weights after the optimizer steps here")
    return parser.parse_args(argv)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def certify(spec: dict, data_dir: Path, out: dict, weights_in: Path | None = None,
            weights_out: Path | None = None, weights_after_out: Path | None = None) -> dict:
    """Fill ``out`` step by step, so that a refusal still carries what was found before it."""
    t0 = time.perf_counter()
    d = spec["data"]
    arrays = datalib.load(data_dir / d["file"], d["sha256"], d["train_samples"], d["test_samples"])
    side = importlib.import_module(SIDES[spec["framework"]]).Certifier(spec, arrays)
    out["environment"] = side.environment()
    out["layers"] = side.records()
    x, y = cert.fixed_batch(arrays)
    batches = cert.step_batches(spec, arrays)
    out["setup"] = {"logits_samples": len(x), "steps": len(batches), "step_batch_size": len(batches[0][1]),
                    "configured_batch_size": spec["train"]["batch_size"], "flops_batch": min(cert.FLOPS_BATCH, len(x)),
                    "dropout": "every Dropout rate set to 0", "batchnorm": "training mode (batch statistics) in the steps",
                    "precision": "fp32 as the kit runs for FLOPs, logits and the kit's own steps; the same model, "
                                 "loss and optimizer rebuilt in fp64 for the certified trajectory"}
    initial = side.export()
    out["flops"] = side.flops(x, y)
    if weights_out:
        cert.save_weights(weights_out, initial)
        out["weights"] = {"source": f"initialised by the {spec['framework']} kit", "file": str(weights_out),
                          "sha256": _sha256(weights_out)}
    if weights_in:
        initial = cert.load_weights(weights_in, out["layers"])
        out["weights"] = {"source": "loaded", "file": str(weights_in), "sha256": _sha256(weights_in)}
    # fp32, as the kit runs: logits in evaluation mode, and the kit's own train_step (informational).
    side.load(initial)
    out["logits"] = {"fp32": {"eval": side.logits(x, training=False)}}
    side.load(initial)
    out["losses"] = {"fp32": side.kit_train_losses(batches)}
    # fp64: the same builder, loss and optimizer, so rounding cannot hide or fake a difference.
    side.use_float64()
    side.load(initial)
    out["logits"]["fp64"] = {"eval": side.logits(x, training=False), "train": side.logits(x, training=True)}
    side.load(initial)                       # undo the running-statistics update of the training-mode pass
    # Declared optimizer differences that one side can remove exactly are removed here; their effect
    # as the kits train shows in the fp32 trajectory above.
    out["neutralised"] = side.neutralisable()
    losses = side.train_losses(batches, neutralise=True)
    if weights_after_out:
        cert.save_weights(weights_after_out, side.export())
    losses.append(side.training_loss(*batches[0]))
    out["losses"]["fp64"] = losses
    out["wall_s"] = time.perf_counter() - t0
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        spec = json.loads(args.spec.read_text())
        framework = spec["framework"]
        if framework not in SIDES:
            raise ValueError(f"framework {framework!r} is not one of {', '.join(SIDES)}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        message = f"{args.spec} is not a readable RunSpec: {exc}"
        write_json_atomic(args.out, {"schema": cert.SIDE_SCHEMA, "status": "failed", "message": message})
        print(message, file=sys.stderr)
        return 2
    out = {"schema": cert.SIDE_SCHEMA, "framework": framework, "experiment": spec.get("experiment"),
           "variant": spec.get("variant"), "profile": spec.get("profile"), "pitfalls": spec.get("pitfalls", []),
           "run_id": spec.get("run_id"), "status": "ok", "message": None}
    code = 0
    try:
        certify(spec, args.data_dir, out, args.weights_in, args.weights_out, args.weights_after_out)
    except cert.UnmappableModel as exc:
        out.update(status="unmappable", message=str(exc))
        code = 2
    except cert.WeightsMismatch as exc:
        out.update(status="refused", message=str(exc))
        code = 2
    except (datalib.DataError, cert.InputError) as exc:
        out.update(status="failed", message=str(exc))
        code = 2
    except (Exception, SystemExit) as exc:     # a failed certificate still leaves its file
        tail = traceback.format_exc().splitlines()[-30:]
        out.update(status="failed", message=f"{type(exc).__name__}: {exc}", log_tail=tail)
        print("\n".join(tail), file=sys.stderr)
        code = 1
    write_json_atomic(args.out, out)
    if code == 2:
        print(out["message"], file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())

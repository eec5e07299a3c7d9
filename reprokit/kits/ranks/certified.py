"""A script under ``--certify``: every process that trains stops after its first step, each leaving its evidence,
and the first of them (rank 0, worker 1, the one process) the certificate's side of its model.

The side is reprokit/kits/certify.py's checks on the model the script trains, captured before its first update
(``certify_side``). Each process's evidence (``evidence/<pid>.json``) is what the certificate at N compares
between two scripts (reprokit/kits/framework_free/rank_checks.py): who it was, its first batch and the samples in it,
the devices it split them over, how its step scaled the loss and added up the gradients (read once the step ran),
and whether its BatchNorm layers synchronise their statistics. Every process stops at the end of its first
step, after its collectives, so none is left waiting for another.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from reprokit.kits import parts
from reprokit.kits.certify import certify_captured, guarded
from reprokit.kits.contract.files import write_json_atomic
from reprokit.kits.contract.spec import ScriptSpec
from reprokit.kits.framework_free import certificate as cert
from reprokit.kits.observation.observe import StopScript
from reprokit.kits.ranks.identity import who
from reprokit.kits.ranks.watch import Watch


class Certified(StopScript):
    """The certificate's side of the captured model is written: the script stops after its first step."""


def arm(w: Watch, folder: Path, weights_from: Path | None) -> None:
    """At this process's first step, before its update: the model's side, where this process is the first; at the
    step's end: its evidence, and the script stops."""
    w.probe.at_first_update(lambda: _first(w, folder, weights_from))
    w.observer.after_first_step.append(lambda: _leave(w, folder))


def _lead(who: dict[str, Any]) -> bool:
    return who["role"] == "process" or (who["role"] == "rank" and who["index"] == 0) or \
        (who["role"] == "worker" and who["index"] == 1)


def _first(w: Watch, folder: Path, weights_from: Path | None) -> None:
    if _lead(who(w)):
        certify_side(w.spec, w.probe, w.named.classes, folder, weights_from)


def _leave(w: Watch, folder: Path) -> None:
    """This process's evidence once its first step ran, then the stop."""
    probe, m = w.probe, w.observer.m
    evidence = getattr(probe, "evidence", None)
    report = evidence.report() if evidence is not None else {}
    (folder / cert.EVIDENCE_FOLDER).mkdir(exist_ok=True)
    write_json_atomic(folder / cert.EVIDENCE_FOLDER / f"{os.getpid()}.json", {
        "who": who(w), "batch": m.observed_batch_sizes[0] if m.observed_batch_sizes else None,
        "replicas": getattr(probe, "replicas", lambda: None)() or 1,
        "samples": ((report.get("samples") or {}).get("1") or {}).get("fingerprints"),
        "loss_scale": report.get("loss_scale"),
        "batchnorm": getattr(probe, "batchnorm_sync", lambda: None)()})
    raise Certified


def certify_side(spec: ScriptSpec, probe: parts.Probe, classes: int, folder: Path, weights_from: Path | None) -> None:
    """The certificate's checks on the model the script trains, captured before its first update, into
    folder/side.json: the PyTorch side also writes its initial weights and its batch, which the TensorFlow
    side (``weights_from``) starts from. A script that trains two models is refused, naming them."""
    out = {"schema": cert.SIDE_SCHEMA, "framework": spec.framework, "experiment": spec.experiment,
           "variant": spec.variant, "profile": spec.profile, "run_id": spec.run_id, "status": "ok",
           "message": None, "captured": list(probe.models), "source": "script"}

    def work() -> None:
        if probe.others:
            raise cert.UnmappableModel(f"the script's optimizer steps more than one model ({', '.join(probe.models)}); "
                                       f"the certificate compares one model per script and stops here")
        other = np.load(weights_from / cert.INPUT_NAME) if weights_from else None
        side = probe.captured(other)
        out["input"] = ("its own standard normal numbers: the model does not take the PyTorch side's batch of shape "
                        f"{tuple(other.shape)}" if weights_from and getattr(probe, "own_input", False)
                        else "the PyTorch script's first batch")
        weights_in = (weights_from / cert.WEIGHTS_NAME if weights_from and not getattr(probe, "own_input", False)
                      else None)
        certify_captured(side, out, classes, spec.device, weights_in,
                         None if weights_from else folder / cert.WEIGHTS_NAME, folder)
        if not weights_from:
            np.save(folder / cert.INPUT_NAME, side.x_first)
    probe.certifying = True
    try:
        guarded(out, work)
    finally:
        probe.certifying = False
    write_json_atomic(folder / cert.SIDE_NAME, out)

"""What a PyTorch process's training shows of its data and its waits, for the pitfalls of many devices.

Read from the training steps the probe already sees (reprokit/kits/pytorch_kit/probe.py), with no read of the device
until the run ends:

- the first ``SAMPLES_PER_EPOCH`` training batches of the first two epochs: their labels (the loader's, where
  its batches carry one per sample) and each sample's fingerprint (the sum of its inputs, kept on the device):
  whether two ranks train on the same samples, and whether an epoch's order is the last one's;
- each measured step's span from the end of its forward pass to its optimizer step
  (reprokit/kits/measurement/backward_spans.py): a rank that waits in the all-reduce for a slower one has the longer
  span.

reprokit/kits/observation/rank_detectors.py judges them across the run's processes.
"""
from __future__ import annotations

from typing import Any

import torch

from reprokit.kits.measurement.backward_spans import BackwardSpans

SAMPLES_PER_EPOCH = 4            # batches per epoch, in epochs 1 and 2


class RankEvidence(BackwardSpans):
    def __init__(self) -> None:
        super().__init__()
        self._batches: dict[int, list[tuple[Any, Any]]] = {}      # epoch -> (fingerprints, labels) on the device
        self.scale: dict[str, Any] | None = None

    def loss_scale(self, seen: Any, own_mean: Any, group: dict[str, Any] | None, model: torch.nn.Module) -> None:
        """At the first step: the loss its backward differentiated over the mean loss of its batch (the probe's own
        cross-entropy count), and how the ranks' gradients add up: DDP averages them, so the step's gradient over
        one device's on the same global batch is that ratio (a script that reduces them itself: not known)."""
        root = seen.last
        if root is None or own_mean is None or root.dim():
            return
        ratio = float(root.detach()) / (seen.scaler or 1.0) / float(own_mean)       # one read, at the first step
        ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
        self.scale = {"per_replica": ratio, "replicas_summed": 1,
                      "factor": ratio if ddp or group is None else None,
                      "how": "the loss its backward differentiated over its batch's mean loss (an AMP scaler's factor "
                             "taken out); " + ("DDP averages the ranks' gradients" if ddp else
                                              "one process" if group is None else
                                              "the script reduces the ranks' gradients itself: not known how")}

    def batch(self, epoch: int, inputs: torch.Tensor | None, labels: Any) -> None:
        """A training forward pass's batch (its inputs, and the labels its loader gave)."""
        if epoch > 2 or inputs is None or not inputs.dim():
            return
        kept = self._batches.setdefault(epoch, [])
        if len(kept) < SAMPLES_PER_EPOCH:
            with torch.no_grad():
                kept.append((inputs.detach().flatten(1).double().sum(1), labels))

    def report(self) -> dict[str, Any]:
        """Read once the run is over: each epoch's samples (labels, fingerprints to 6 significant digits)."""
        epochs = {}
        for epoch, kept in self._batches.items():
            fingerprints = [float(f"{v:.6g}") for f, _ in kept for v in f.cpu().tolist()]
            labels = [int(v) for _, lab in kept if isinstance(lab, torch.Tensor) for v in lab.cpu().tolist()]
            epochs[str(epoch)] = {"fingerprints": fingerprints,
                                  "labels": labels if len(labels) == len(fingerprints) else None}
        return {"samples": epochs, "backward_span_s": self.spans, "loss_scale": self.scale,
                "how": f"the first {SAMPLES_PER_EPOCH} training batches of epochs 1 and 2 (labels, each sample's "
                       f"sum of inputs); each measured step's span from its forward pass's end to its optimizer step"}

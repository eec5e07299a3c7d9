"""What the bound scripts share: tiny generated data, and a log line for every batch they take.

Each line (JSON, appended to the file REPROKIT_BOUND_LOG names) says what a step or an evaluation batch saw:
its kind, epoch, batch size, labels in order, first pixel and loss, so that a bounded run can be laid over an
unbounded one step by step."""
import json
import os

import torch


def data(train: int = 320, test: int = 500):
    """Images 3x8x8 whose class shifts their mean, from a fixed seed; the test set sorted by class (as some
    datasets come), so a pass over part of it sees only the first classes."""
    g = torch.Generator().manual_seed(0)

    def split(y):
        return torch.randn(len(y), 3, 8, 8, generator=g) + (y.float() / 5).view(-1, 1, 1, 1), y
    return split(torch.arange(train) % 10), split(torch.arange(test) * 10 // test)


def log(kind: str, epoch: int, inputs, labels, loss=None) -> None:
    line = {"kind": kind, "epoch": epoch, "batch": len(labels), "labels": labels.tolist(),
            "first": round(float(inputs[0, 0, 0, 0]), 6), "loss": None if loss is None else loss.item()}
    with open(os.environ["REPROKIT_BOUND_LOG"], "a") as f:
        f.write(json.dumps(line) + "\n")

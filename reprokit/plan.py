"""Expand experiments x variants x frameworks x repeats into fully resolved RunSpecs.

A RunSpec is everything a kit needs and nothing it must guess: the kit never
reads TOML or applies a default. Its id is a hash of its content, so a
finished run is found again by id and an interrupted matrix resumes.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from reprokit import datasets
from reprokit.experiments import Experiment

SPEC_SCHEMA = "reprokit.runspec/1"
# Seconds a run may take before it is stopped and recorded as a timeout.
TIMEOUT_S = {"quick": 900, "standard": 3 * 3600, "full": 48 * 3600}


@dataclass(frozen=True)
class Options:
    profile: str
    device: str                     # "cpu" | "gpu"
    repeats: int
    frameworks: tuple[str, ...]
    data_dir: Path
    allow_download: bool
    dataset: str | None = None      # override the profile's dataset (e.g. synthetic on an offline GPU box)
    timeout_s: float | None = None


def run_id(spec: dict) -> str:
    body = {k: v for k, v in spec.items() if k != "run_id"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def _threads(requested: int | str) -> int:
    return len(os.sched_getaffinity(0)) if requested == "auto" else int(requested)


def _data(resolved: dict, opts: Options) -> dict:
    data = dict(resolved["data"])
    if opts.dataset:
        data["dataset"] = opts.dataset
    prepared = datasets.prepare(
        {"dataset": data["dataset"], "train_samples": data.get("train_samples"),
         "test_samples": data.get("test_samples"), "seed": resolved["train"]["seed"]},
        opts.data_dir, allow_download=opts.allow_download)
    data.update(file=prepared.file, sha256=prepared.sha256,
                train_samples=prepared.train_samples, test_samples=prepared.test_samples)
    return data


def specs_for(exp: Experiment, opts: Options, describe, code: dict) -> list[dict]:
    """The RunSpecs of one experiment; describe(framework) gives the runner's facts (lock, image)."""
    resolved = exp.resolved(opts.profile)
    data = _data(resolved, opts)
    numerics = dict(resolved["numerics"])
    numerics["cpu_threads"] = {k: _threads(v) for k, v in numerics["cpu_threads"].items()}
    train = dict(resolved["train"])
    train.setdefault("eval_batch_size", train["batch_size"])
    train.setdefault("max_steps_per_epoch", None)
    out = []
    for framework in exp.frameworks:
        if framework not in opts.frameworks:
            continue
        for repeat in range(opts.repeats):
            spec = {
                "schema": SPEC_SCHEMA,
                "experiment": exp.name,
                "variant": "fixed",
                "framework": framework,
                "profile": opts.profile,
                "repeat": repeat,
                "device": opts.device,
                "model": resolved["model"],
                "data": data,
                "train": train,
                "numerics": numerics,
                "differences": resolved.get("differences", []),
                "measure": {"window_steps": 1 if opts.device == "cpu" else 10, "memory_every_steps": 5},
                "limits": {"timeout_s": opts.timeout_s or TIMEOUT_S[opts.profile]},
                "provenance": {**code, **describe(framework)},
            }
            spec["run_id"] = run_id(spec)
            out.append(spec)
    return out

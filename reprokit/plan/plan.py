"""Expand experiments x variants x frameworks x repeats into fully resolved RunSpecs.

A RunSpec is everything a kit needs and nothing it must guess: the kit never
reads TOML or applies a default. Its id is a hash of its content, so a
finished run is found again by id and an interrupted matrix resumes.
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from reprokit.environments import datasets
from reprokit.errors import UserError
from reprokit.kits.contract.names import REGISTRY, label
from reprokit.kits.contract.pitfalls import PITFALLS, Pitfall, for_framework
from reprokit.kits.contract.spec import DEFAULTABLE, FRAMEWORK_DEFAULT, RunSpec, ScriptSpec, Spec
from reprokit.kits.contract.split_limits import not_at_n
from reprokit.plan import device_counts, frameworks
from reprokit.plan.experiments import Experiment
from reprokit.plan.inputs import DataStep
from reprokit.results import runs
from reprokit.results.runs import ADDED, NUMERICS, POSTED, REMOVED

SPEC_SCHEMA = "reprokit.runspec/1"
TUNED = runs.TUNED      # every experiment's fast path, planned by reprokit/plan/tuning.py from its fixed specs
# Seconds a run may take before it is stopped and recorded as a timeout.
TIMEOUT_S = {"quick": 900, "standard": 3 * 3600, "full": 48 * 3600}


@dataclass(frozen=True)
class Options:
    profile: str
    device: str                     # "cpu" | "gpu"
    repeats: int
    frameworks: tuple[str, ...]     # those this experiment runs (reprokit/plan/frameworks.py chose them)
    data: DataStep                  # what a run reads, prepared first on a run, looked up on a dry run
    dataset: str | None = None      # override the profile's dataset (e.g. synthetic on an offline GPU box)
    timeout_s: float | None = None
    variants: tuple[str, ...] = ("fixed",)
    ablation: bool = False          # also each pitfall alone, "+<pitfall>", and as_posted's factors removed alone
    alone: frozenset[str] = frozenset()   # ... or only these of their pitfalls (those the claims name)
    max_steps: int | None = None    # a tighter cap on training steps per epoch (a bounded check)
    devices: tuple[int, ...] = ()   # --devices as given; () runs each experiment at its own device_counts


S = TypeVar("S", bound=RunSpec | ScriptSpec)


def identified(spec: S) -> S:
    """The spec with its run id, the hash of everything else in it (RunSpec.computed_run_id). The plan hands its
    specs on typed; one becomes a dict as the JSON a kit process reads (reprokit/runners/base.py run_spec)."""
    return dataclasses.replace(spec, run_id=spec.computed_run_id())


NATIVE_SIDE = {"cifar10": 32, "learnable": 32}      # the generated synthetic data takes any input size


def _kept(data: dict[str, Any], asked: str | None) -> bool:
    """Whether --dataset ``asked`` leaves this experiment on its own data: images fed as they are (resize "none")
    at an input size the asked dataset's images do not have (ResNet-50's 224 against CIFAR-10's 32)."""
    side = NATIVE_SIDE.get(asked or "")
    return side is not None and data["resize"] == "none" and data["input_size"] != side


def _request(resolved: dict[str, Any], opts: Options) -> dict[str, Any]:
    """The dataset one experiment's runs read, as the data step prepares it."""
    data = resolved["data"]
    dataset = data["dataset"] if _kept(data, opts.dataset) else opts.dataset or data["dataset"]
    return {"dataset": dataset, "train_samples": data.get("train_samples"),
            "test_samples": data.get("test_samples"), "seed": resolved["train"]["seed"],
            "input_size": data["input_size"], "resize": data["resize"], "num_classes": resolved["model"]["num_classes"]}


def _ask_for_data(exp: Experiment, opts: Options) -> None:
    """Ask the data step for what the experiment's runs read, before it is planned: its arrays and, where a posted
    torchvision reader runs, the archive's batches. Planning itself only reads what is prepared."""
    resolved = exp.resolved(opts.profile)
    request = _request(resolved, opts)
    opts.data.prepare(request)
    readers = {p for v in variants_of(exp, opts).values() for fw in opts.frameworks
               for p in for_framework(v.pitfalls, fw)}
    if request["dataset"] == "cifar10" and Pitfall.PT_CPU_RESIZE_DATALOADER in readers:
        opts.data.cifar10_batches()


def _data(resolved: dict[str, Any], opts: Options) -> dict[str, Any]:
    request = _request(resolved, opts)
    data = {**resolved["data"], "dataset": request["dataset"]}
    prepared = opts.data.prepared(request)
    if prepared is None:            # a dry run before the data exists: the spec's id waits for its checksum
        train, test = datasets.expected_counts(request)
        data.update(file=None, sha256=None, train_samples=train, test_samples=test)
        return data
    data.update(file=prepared.file, sha256=prepared.sha256,
                train_samples=prepared.train_samples, test_samples=prepared.test_samples)
    return data


def _posted_readers(data: dict[str, Any], pitfalls: list[str], opts: Options) -> dict[str, Any]:
    """The data as the posted readers read CIFAR-10: torchvision's over the archive's batches (extracted
    here, before any run), and tfds.load('cifar10') where the data step prepared TFDS's dataset; without
    it the posted tf.data pipeline runs over the kit's arrays, a declared adaptation."""
    if data["dataset"] != "cifar10":
        return data
    if Pitfall.TF_BATCH_OF_ONE in pitfalls:
        return {**data, "tfds": opts.data.tfds()}
    return data


@dataclass(frozen=True)
class Variant:
    """One planned variant: its pitfalls, its numerics over the experiment's, and the frameworks whose posted code
    it reproduces (those with a pitfall in the named variant it comes from; empty: it is no posted code, and
    every framework runs it)."""
    pitfalls: list[str]
    numerics: dict[str, Any]
    posted_by: frozenset[str] = frozenset()


def variants_of(exp: Experiment, opts: Options) -> dict[str, Variant]:
    """Variant name -> Variant, for the variants this experiment defines among those asked for, each named
    variant followed by its single changes: each pitfall added alone to fixed ("+p", with the experiment's
    numerics); with --ablation also as_posted's numerics added alone ("+numerics") and each of as_posted's
    factors removed alone ("-p", "-numerics"), which the decomposition of its gap needs
    (reprokit/results/shares.py)."""
    out: dict[str, Variant] = {"fixed": Variant([], {})} if "fixed" in opts.variants else {}
    for name in opts.variants:
        if name == "fixed":
            continue
        if name in exp.script_variants or name == TUNED:
            continue        # the posted scripts themselves (reprokit/plan/script_plan.py), tuned (tuning.py)
        if name not in exp.variants:
            if name in ("as_posted", "verbatim"):
                continue    # the posted code, asked for every experiment; this one has none (ResNet-50's)
            raise UserError(f"--variants: experiment {exp.name!r} has no variant {name!r}; it has: fixed, "
                            f"{', '.join([*exp.variants, *exp.script_variants, TUNED])}")
        pitfalls, numerics = exp.variants[name]["pitfalls"], exp.variants[name].get("numerics", {})
        posted_by = frozenset(PITFALLS[p]["framework"] for p in pitfalls)
        out[name] = Variant(pitfalls, numerics, posted_by)
        for pitfall in pitfalls:
            if opts.ablation or pitfall in opts.alone:
                out[f"{ADDED}{pitfall}"] = Variant([pitfall], {}, posted_by)
        if opts.ablation and name == POSTED:
            out.update({k: Variant(p, n, posted_by) for k, (p, n) in _removed_alone(pitfalls, numerics).items()})
    return out


def _removed_alone(pitfalls: list[str], numerics: dict[str, Any]) -> dict[str, tuple[list[str], dict[str, Any]]]:
    """as_posted's numerics added alone to fixed, and each of its factors removed alone from it."""
    out: dict[str, tuple[list[str], dict[str, Any]]] = {f"{ADDED}{NUMERICS}": ([], numerics)} if numerics else {}
    for pitfall in pitfalls:
        out[f"{REMOVED}{pitfall}"] = ([p for p in pitfalls if p != pitfall], numerics)
    if numerics:
        out[f"{REMOVED}{NUMERICS}"] = (pitfalls, {})
    return out


def _declared_defaults(numerics: dict[str, Any], frameworks: Iterable[str]) -> list[dict[str, Any]]:
    """The declared difference of each setting left at the frameworks' own defaults, by its settings key ("tf32"
    declares tf32.matmul and tf32.convolution: reprokit/report/settings_table.py matches keys, never labels), for
    the frameworks whose posts ran so (not those a command runs: a run's id does not depend on its company)."""
    return [{"field": DEFAULTABLE[key], "key": key,
             **{fw: f"{label(fw)}'s default, read back at run time" for fw in REGISTRY if fw in frameworks},
             "why": "as posted: each framework ran its own default, which the result records"}
            for key, value in numerics.items() if value == FRAMEWORK_DEFAULT]


def run_model(model: dict[str, Any]) -> dict[str, Any]:
    """The RunSpec's model from the experiment's: a custom model's builders (model.<framework> in the TOML) under
    ``builders``."""
    builders = {k: v for k, v in model.items() if k in REGISTRY}
    return {**{k: v for k, v in model.items() if k not in REGISTRY}, **({"builders": builders} if builders else {})}


def not_run(exp: Experiment, opts: Options) -> list[str]:
    """A line where --dataset is not applied to this experiment (its images cannot be fed as they are), and one
    per framework asked for that runs none of a posted variant (nor its single changes), or has no script in a
    variant of posted scripts: it has no posted code to reproduce."""
    skipped: dict[str, list[str]] = {}
    for fw in opts.frameworks:
        for name, v in variants_of(exp, opts).items():
            if v.posted_by and fw not in v.posted_by and name in exp.variants:
                skipped.setdefault(fw, []).append(name)
        skipped[fw] = skipped.get(fw, []) + [name for name, scripts in exp.script_variants.items()
                                             if name in opts.variants and fw not in scripts]
    data, asked = exp.resolved(opts.profile).get("data"), opts.dataset or ""
    kept = ([f"{exp.name}: --dataset {asked} not applied: it feeds {data['input_size']}x{data['input_size']} images "
             f"as they are (data.resize none), and {asked}'s are {NATIVE_SIDE[asked]}x{NATIVE_SIDE[asked]}; it keeps "
             f"its {data['dataset']} data"] if data and _kept(data, asked) else [])
    posted = {"as_posted", *exp.script_variants}

    def why(fw: str, names: list[str]) -> str:
        if set(names) <= posted:
            return f"no posted code in {label(fw)}"
        one = len(names) == 1
        return (f"{'it changes' if one else 'they change'} nothing of {label(fw)}'s, whose fixed runs stand for "
                f"{'it' if one else 'them'}")
    return kept + [f"{exp.name}: {label(fw)} runs no {', '.join(names)} (not run: {why(fw, names)})"
                   for fw, names in skipped.items() if names]


def runnable_at_n(specs: list[Spec]) -> tuple[list[Spec], list[str]]:
    """The specs the kits can run, and a line for each run at N devices a kit cannot split (a posted loader's own
    batches, TensorFlow's XLA compile: reprokit/kits/contract/split_limits.py), left out before any run."""
    kept: list[Spec] = []
    said: dict[str, None] = {}
    for spec in specs:
        why = not_at_n(spec.to_dict()) if isinstance(spec, RunSpec) and spec.devices > 1 else None
        if why is None:
            kept.append(spec)
        else:
            said[f"{spec.experiment}: {label(spec.framework)} {spec.variant} at {spec.devices} devices (not run: "
                 f"{why}; it runs at one device)"] = None
    return kept, list(said)


def counts(exp: Experiment, opts: Options) -> tuple[int, ...]:
    """The devices the experiment's runs train on, a run at each: --devices where given, else its device_counts."""
    return opts.devices or exp.device_counts


def global_batches(exp: Experiment, opts: Options) -> dict[int, int]:
    """Each count's train.batch_size, the global batch: the experiment's at every count (strong scaling), or N times
    it (weak: it is each device's). A count it cannot take is refused in one sentence, before any data step: the
    training samples are the profile's sizes, as the data step is asked for them."""
    resolved = exp.resolved(opts.profile)
    samples, _ = datasets.expected_counts(_request(resolved, opts))
    source = f"--devices {device_counts.text(opts.devices)}" if opts.devices else \
        f"{exp.path}: experiment.device_counts {list(exp.device_counts)}"
    return device_counts.global_batches(exp.name, resolved["train"]["batch_size"], exp.scaling, counts(exp, opts),
                                        samples, opts.profile, source)


def specs_for(exp: Experiment, opts: Options, describe: Callable[[str], dict[str, Any]],
              code: dict[str, Any]) -> list[RunSpec]:
    """The RunSpecs of one experiment, after its data step (which a dry run's does not prepare); describe(framework)
    gives the runner's facts (lock, image). Each of ``opts.frameworks`` runs it, or one sentence says why its kit
    cannot; each run at each of its counts of devices (``counts``), its global batch at that count."""
    frameworks.check(exp, opts.frameworks, opts.profile)
    batches = global_batches(exp, opts)
    _ask_for_data(exp, opts)
    resolved = exp.resolved(opts.profile)
    # CPU threads stay as written: "auto" is resolved by the kit, on the CPUs its run is pinned to.
    numerics = dict(resolved["numerics"])
    # evaluation's batch stays the experiment's at every count (evaluation is not sharded)
    train = {"eval_batch_size": resolved["train"]["batch_size"], "max_steps_per_epoch": None, **resolved["train"]}
    if opts.max_steps:
        train["max_steps_per_epoch"] = min(train["max_steps_per_epoch"] or opts.max_steps, opts.max_steps)
    common = {
        "schema": SPEC_SCHEMA,
        "experiment": exp.name,
        "profile": opts.profile,
        "device": opts.device,
        "model": run_model(resolved["model"]),
        "data": _data(resolved, opts),
        "train": train,
        "numerics": numerics,
        "differences": resolved.get("differences", []),
        "measure": {"window_steps": 1 if opts.device == "cpu" else 10, "memory_every_steps": 5,
                    "step_timing": True},
        "limits": {"timeout_s": opts.timeout_s or TIMEOUT_S[opts.profile]},
        "hooks": resolved.get("hooks", {}),
    }
    out = []
    for framework in opts.frameworks:
        seen: set[str] = set()
        for variant, v in variants_of(exp, opts).items():
            mine = for_framework(v.pitfalls, framework)
            key = json.dumps([mine, v.numerics], sort_keys=True)
            if v.posted_by and framework not in v.posted_by:
                continue    # no posted code in this framework (not_run says so)
            if (v.pitfalls and not mine and not v.numerics) or key in seen:
                continue    # the other framework's pitfall, or the same runs under another name
            seen.add(key)
            data = _posted_readers(common["data"], mine, opts)
            declared = common["differences"] + _declared_defaults(v.numerics, v.posted_by or exp.frameworks)
            for count, repeat in itertools.product(batches, range(opts.repeats)):
                spec = {**copy.deepcopy(common), "data": data, "framework": framework, "variant": variant,
                        "numerics": {**numerics, **v.numerics},
                        "differences": declared,
                        "repeat": repeat, "devices": count,
                        "train": {**common["train"], "batch_size": batches[count]},
                        "pitfalls": mine, "pitfall_summaries": {p: PITFALLS[p]["summary"] for p in mine},
                        "provenance": {**code, **describe(framework)}, "run_id": ""}
                # Through the kits' typed loader: every field explicit, or the plan has a bug.
                out.append(identified(RunSpec.from_dict(spec)))
    frameworks.check_specs(out, exp.path)
    return out

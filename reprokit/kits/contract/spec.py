"""The RunSpec, typed: everything a kit needs to run, loaded once from the JSON the host wrote.

The host plans and hashes RunSpecs as JSON (reprokit/plan/plan.py); a kit entry point
turns that JSON into a ``RunSpec`` with ``RunSpec.from_dict`` and reads nothing
else. A field the spec lacks or does not know is refused there, with its path,
before any framework starts. Standard library only: the kits import it, and so
does the host.
"""
from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reprokit.kits.contract.names import REGISTRY

if typing.TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from reprokit.kits.contract.pitfalls import Pitfalls



class SpecError(ValueError):
    """A RunSpec that does not have the shape the kits read (one sentence naming the field)."""


# A numerics setting the kit leaves as the framework has it (as a post ran it), and reads back at run time;
# the settings that may be left so, as the report names them (a declared difference's field).
FRAMEWORK_DEFAULT = "framework_default"
DEFAULTABLE = {"tf32": "TF32", "cudnn_autotune": "cuDNN autotuning"}


@dataclass(frozen=True)
class BatchNorm:
    momentum_keep: float     # Keras's momentum; PyTorch's is 1 - this
    epsilon: float


@dataclass(frozen=True)
class Init:
    conv: str
    dense: str
    bias: str


@dataclass(frozen=True)
class Model:
    name: str                                # vgg16 | simplecnn | custom
    num_classes: int
    width_multiplier: float = 1.0
    classifier_width: int | None = None      # vgg16
    dropout: float | list[float] | None = None
    dropout_kind: str | None = None          # element | channel
    head: str | None = None
    batchnorm: BatchNorm | None = None       # simplecnn
    init: Init | None = None                 # built-in models; a custom model initialises itself
    # custom: framework name -> "module:function" builder (the TOML's model.<framework>, for any registered one)
    builders: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def builder(self, framework: str) -> str | None:
        return self.builders.get(framework)


@dataclass(frozen=True)
class Tfds:
    """A TFDS dataset the data step prepared (the posted TensorFlow input): its folder and files' sha256."""
    dir: str                                 # relative to the data folder
    sha256: str


@dataclass(frozen=True)
class Data:
    dataset: str
    input_size: int
    resize: str                              # none | bilinear
    scale: str                               # unit | raw255
    shuffle: bool
    drop_last: bool
    train_samples: int
    test_samples: int
    file: str | None = None                  # the prepared .npz in the data folder
    sha256: str | None = None
    tfds: Tfds | None = None                 # where the posted tf.data pipeline reads tfds.load('cifar10')

    @property
    def resize_to(self) -> int | None:
        return self.input_size if self.resize == "bilinear" else None

    @property
    def unit_scale(self) -> float:
        return 1.0 / 255.0 if self.scale == "unit" else 1.0


@dataclass(frozen=True)
class Optimizer:
    name: str                                # adam | sgd
    lr: float
    beta1: float | None = None
    beta2: float | None = None
    epsilon: float | None = None
    momentum: float | None = None
    nesterov: bool | None = None


@dataclass(frozen=True)
class Train:
    batch_size: int
    eval_batch_size: int
    epochs: int
    optimizer: Optimizer
    loss: str
    seed: int
    warmup_steps: int
    max_steps_per_epoch: int | None = None
    target_accuracy: float | None = None


@dataclass(frozen=True)
class Threads:
    intra_op: int | str                      # a count, or "auto": every CPU this process may run on
    inter_op: int | str                      # a count, or FRAMEWORK_DEFAULT: the framework's own pool

    def intra(self) -> int:
        """The intra-op threads, "auto" resolved here, in the kit, after the runner pinned its CPUs."""
        return len(os.sched_getaffinity(0)) if self.intra_op == "auto" else int(self.intra_op)


@dataclass(frozen=True)
class Numerics:
    precision: str                           # fp32 | bf16_mixed | fp16_mixed (with loss scaling)
    tf32: bool | str                         # or FRAMEWORK_DEFAULT: the framework's own, read back
    cudnn_autotune: bool | str               # or FRAMEWORK_DEFAULT
    compile: bool                            # torch.compile, tf.function(jit_compile=True); JAX always compiles
    cpu_threads: Threads
    channels_last: bool = False              # PyTorch's convolutions in NHWC (TensorFlow's layout already);
                                             # RunSpec.to_dict leaves it out where False


@dataclass(frozen=True)
class Measure:
    window_steps: int
    memory_every_steps: int
    step_timing: bool


# One of the user's own functions per framework: framework name -> "module:function" in the experiment's folder.
Hook = dict[str, str]


@dataclass(frozen=True)
class Hooks:
    input: Hook | None = None                # options, split, x, y, batch_size, epoch -> batches
    evaluate: Hook | None = None             # options, model, inputs -> outputs
    metrics: Hook | None = None              # options -> an object with update(outputs, labels, loss), result()

    def of(self, name: str, framework: str) -> str | None:
        hook: Hook | None = getattr(self, name)
        return hook.get(framework) if hook else None


@dataclass(frozen=True)
class Limits:
    timeout_s: float


@dataclass(frozen=True)
class RunSpec:
    schema: str
    run_id: str
    experiment: str
    variant: str
    framework: str
    profile: str
    device: str                              # cpu | gpu
    repeat: int
    model: Model
    data: Data
    train: Train
    numerics: Numerics
    measure: Measure
    limits: Limits
    pitfalls: Pitfalls
    pitfall_summaries: dict[str, str]
    differences: list[dict[str, Any]]
    provenance: dict[str, Any]
    hooks: Hooks = field(default_factory=Hooks)
    # The devices the run trains on (an experiment's device_counts, --devices): the kit's data parallelism at N
    # (reprokit/kits/training_loop/distributed.py); train.batch_size is the global batch at that count.
    devices: int = 1

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        return parse(cls, d, "spec")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["pitfalls"] = self.pitfalls.names()
        # written only where set, so that a spec without it keeps the run id (and reads as) it had before it existed
        if not out["numerics"]["channels_last"]:
            del out["numerics"]["channels_last"]
        if out["devices"] == 1:
            del out["devices"]
        return out

    def computed_run_id(self) -> str:
        """The run id this spec's content hashes to: the sha256 of its JSON (sorted keys) without run_id,
        first 16 hex digits (a dataclass field holds the id the plan wrote, so this method has its own name)."""
        import hashlib
        import json
        body = {k: v for k, v in self.to_dict().items() if k != "run_id"}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Requirements:
    """A script's extra requirements (reprokit/environments/script_requirements.py): its file, what the lock
    already pins, and the hash-pinned lines, which the host installs once per machine and the probe reads."""
    file: str
    sha256: str
    install: list[str]
    in_lock: list[str]


@dataclass(frozen=True)
class Mount:
    """A folder of the user's own data, shown where the script looks (--data): its place relative to the
    script's folder, the host folder, and a manifest of its files (names, sizes, modification times)."""
    at: str
    folder: str
    files: int
    bytes: int
    manifest_sha256: str


@dataclass(frozen=True)
class NotebookCell:
    """A code cell as the probe runs it: its number (counting every cell from 1, markdown too), its lines in the
    converted text, and the error it is expected to raise: its saved error output's type and first line, or any
    error where only the ``raises-exception`` tag says so (``tagged``)."""
    number: int
    first_line: int
    last_line: int
    error: str | None = None
    error_value: str | None = None
    tagged: bool = False


@dataclass(frozen=True)
class Notebook:
    """A notebook run as its code cells, in order (reprokit/environments/notebooks.py): its sha256, the text the
    host converted it to (what the probe runs) and that text's sha256, the IPython lines left out, those run as
    their Python (``honoured``), and the code cells, which the probe runs one at a time. A spec planned before
    cells ran one at a time has neither of the last two, and runs its text as one script."""
    sha256: str
    code: str
    code_sha256: str
    left_out: list[str]
    honoured: list[str] = field(default_factory=list)
    cells: list[NotebookCell] = field(default_factory=list)


@dataclass(frozen=True)
class Launcher:
    """The launcher a script is started through (reprokit/kits/contract/launchers.py): its name as typed, its own
    options as the run gives them (after the changes the kit declares: ``{devices}`` replaced, the rendezvous kept on
    loopback), the processes it starts on this machine, and those declarations."""
    name: str
    options: list[str]
    processes: int
    declared: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Script:
    """A user's own training script, run unmodified: its file in its folder (given to the probe as a path), or,
    where it imports its own package, the module ``python -m`` runs from the folder, its root."""
    path: str                                # relative to the folder
    args: list[str]
    folder: str                              # the folder on the host (the runner shows it to the probe read-only)
    files: dict[str, str]                    # every .py under the folder, relative name -> sha256
    shim: str | None = None                  # a declared file run before the script (defines what a post left out)
    requirements: Requirements | None = None  # extra, hash-pinned, layered on the framework's lock
    mounts: list[Mount] = field(default_factory=list)   # the user's own data folders (--data)
    notebook: Notebook | None = None          # where path is a notebook (.ipynb): the script its code cells make
    module: str | None = None                 # runs as python -m MODULE from the folder (path is MODULE's file)
    left_out: list[str] = field(default_factory=list)    # folders of the copy named like the lock's modules
    launcher: Launcher | None = None          # torchrun, accelerate launch, fabric run: it starts the script's ranks


# An evaluation pass's bound also counts samples, so that a loader of small batches still evaluates a few
# hundred: eval_steps x this (300 on the quick profile, the whole CIFAR-10 test set on standard).
EVAL_SAMPLES_PER_STEP = 100


@dataclass(frozen=True)
class Bounds:
    """How far the probe lets a script train: training steps per epoch, epochs, evaluation steps per pass."""
    max_steps: int | None
    epochs: int | None
    eval_steps: int | None

    @property
    def eval_samples(self) -> int | None:
        """The samples an evaluation pass takes at least (besides its eval_steps batches)."""
        return self.eval_steps * EVAL_SAMPLES_PER_STEP if self.eval_steps else None


@dataclass(frozen=True)
class ScriptData:
    """The data the probe puts where the script looks: the verified CIFAR-10 or a generated stand-in (declared)."""
    dataset: str
    file: str | None
    sha256: str | None
    train_samples: int
    test_samples: int
    tfds: Tfds | None = None                 # TFDS's cifar10 where the data step prepared it (tfds.load reads it)


@dataclass(frozen=True)
class ScriptSpec:
    """A run of a user's own script under the probe (python -m reprokit.kits.probe): the same identity, measurement and
    limits as a RunSpec, the script and its bounds instead of a model, data pipeline and loop."""
    schema: str
    run_id: str
    experiment: str
    variant: str
    framework: str
    profile: str
    device: str
    repeat: int
    source: str                              # "script"
    script: Script
    bounds: Bounds
    data: ScriptData
    measure: Measure
    warmup_steps: int
    limits: Limits
    differences: list[dict[str, Any]]
    provenance: dict[str, Any]
    pitfalls: list[str]                      # always empty: a script carries no switch of the kit's
    pitfall_summaries: dict[str, str]
    devices: int = 1                         # the devices the run holds (--devices): GPUs, or stand-ins on a CPU

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ScriptSpec:
        spec = parse(cls, d, "spec")
        if spec.pitfalls or spec.pitfall_summaries:
            raise SpecError("spec.pitfalls: a script's spec carries no pitfalls (the script is run as written)")
        return spec

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if not out["script"]["mounts"]:      # written only where given: a spec without keeps the run id it had
            del out["script"]["mounts"]
        if out["script"]["notebook"] is None:
            del out["script"]["notebook"]
        for name in ("module", "left_out", "launcher"):
            if not out["script"][name]:
                del out["script"][name]
        if out["devices"] == 1:              # one device, as every spec before --devices: the same run id
            del out["devices"]
        return out

    def computed_run_id(self) -> str:
        """The run id this spec's content hashes to: the sha256 of its JSON (sorted keys) without run_id,
        first 16 hex digits (a dataclass field holds the id the plan wrote, so this method has its own name)."""
        import hashlib
        import json
        body = {k: v for k, v in self.to_dict().items() if k != "run_id"}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


# The host-kit contract's one spec type, what a training run is given: a kit run's RunSpec, or a ScriptSpec (a
# user's script under the probe). Specs travel typed; one is a dict only as the JSON a kit process reads, and where
# the certificates and results take one.
Spec = RunSpec | ScriptSpec


def typed(spec: dict[str, Any]) -> Spec:
    """A spec's JSON (a plan's, a result's) as its type: a ScriptSpec for a script's run, else a RunSpec."""
    if spec.get("source") == "script":
        return ScriptSpec.from_dict(spec)
    return RunSpec.from_dict(spec)


D = TypeVar("D", bound="DataclassInstance")


def parse(kind: type[D], value: Any, path: str) -> D:
    """A spec dataclass (nested ones too) from a JSON object, refusing missing and unknown fields."""
    if not isinstance(value, dict):
        raise SpecError(f"{path} must be an object, got {value!r}")
    value = read_older(kind, value)
    hints = _hints(kind)
    fields = {f.name: f for f in dataclasses.fields(kind)}
    unknown = set(value) - set(fields)
    if unknown:
        raise SpecError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}")
    args = {}
    for name, f in fields.items():
        if name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SpecError(f"{path}.{name} is missing")
            continue
        args[name] = _value(hints[name], value[name], f"{path}.{name}")
    return kind(**args)


def read_older(kind: type, value: dict[str, Any]) -> dict[str, Any]:
    """A spec object as this kit writes it, from a result written before builders and hooks were keyed by any
    framework: a model's one field per framework (null for a built-in model) read into ``builders``, and a hook's
    null sides dropped; and a notebook's honoured lines and cells, which a spec planned before them lacks, as none.
    Anything else as it is."""
    if kind is Model and any(k in REGISTRY for k in value):
        builders = {k: v for k, v in value.items() if k in REGISTRY and v is not None}
        return {**{k: v for k, v in value.items() if k not in REGISTRY}, "builders": builders}
    if kind is Hooks:
        return {k: {fw: ref for fw, ref in v.items() if ref is not None} if isinstance(v, dict) else v
                for k, v in value.items()}
    if kind is Notebook:         # planned before its cells ran one at a time: its text runs as one script
        return {"honoured": [], "cells": [], **value}
    return value


def _hints(kind: type[DataclassInstance]) -> dict[str, Any]:
    """The fields' types; the pitfalls module only for a kit run's spec (a probed script's process never loads it)."""
    if any(f.type == "Pitfalls" for f in dataclasses.fields(kind)):
        from reprokit.kits.contract.pitfalls import Pitfalls
        return typing.get_type_hints(kind, localns={"Pitfalls": Pitfalls})
    return typing.get_type_hints(kind)


def _value(hint: Any, value: Any, path: str) -> Any:
    if getattr(hint, "__name__", None) == "Pitfalls":
        return hint.of(value, path)
    nested: list[Any] = [t for t in (typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,))
                         if dataclasses.is_dataclass(t)]
    if nested and value is not None:
        return parse(nested[0], value, path)
    items = typing.get_args(hint) if typing.get_origin(hint) is list else ()     # a script's mounts, a notebook's cells
    if items and isinstance(items[0], type) and dataclasses.is_dataclass(items[0]) and isinstance(value, list):
        return [parse(items[0], item, f"{path}.{i}") for i, item in enumerate(value)]
    return value

"""The ScriptSpecs of a script experiment: each framework's own script, run unmodified under the probe.

A script experiment names one script per framework (the experiment file's ``[scripts]``, or
``reprokit reproduce --script pytorch=PATH --script tensorflow=PATH``) instead of model builders.
Its specs have the identity, measurement and limits of a kit run's, and instead of a model, a data
pipeline and a loop: the script (its path in its folder, its arguments, the sha256 of every .py file
under the folder and of its shim), the bounds the probe holds it to, and the data the probe puts
where the script looks. Every one of those is in the run's id, so an edited script never reuses a
result. The profile sets the bounds: ``quick`` 3 training steps, 3 evaluation batches and 1 epoch on
a generated stand-in; ``standard`` 2 epochs of at most 300 steps (or --max-steps) on CIFAR-10;
``full`` the script as written.
"""
from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reprokit.environments import datasets, notebooks, script_requirements
from reprokit.errors import UserError
from reprokit.kits.contract import work_folder
from reprokit.kits.contract.spec import ScriptSpec
from reprokit.plan import data_mounts, launchers, script_datasets
from reprokit.plan.plan import TIMEOUT_S, Options, identified
from reprokit.results import provenance

SCHEMA = "reprokit.scriptspec/1"
VARIANT = "script"
# (training steps per epoch, epochs, evaluation batches per pass, warmup steps) by profile
BOUNDS = {"quick": (3, 1, 3, 1), "standard": (300, 2, 300, 5), "full": (None, None, None, 5)}
# A CIFAR-10-shaped generated set that a small CNN learns (reprokit/environments/datasets.py).
STAND_IN = "learnable"


def _files(folder: Path, left_out: list[str]) -> dict[str, str]:
    """Every .py file of the script's folder that a run copies (reprokit/kits/contract/work_folder.py), by relative
    name, with its sha256 (the script imports them); a folder that would copy more than the limit is refused."""
    copied = work_folder.copied_bytes(folder, left_out)
    if copied > work_folder.COPY_LIMIT_BYTES:
        raise UserError(f"{folder} would copy {copied >> 20} MiB into every run's work folder, more than the "
                        f"{work_folder.COPY_LIMIT_BYTES >> 20} MiB a run allows: keep the scripts in a folder of "
                        f"their own, with their data and checkpoints elsewhere (the kit serves the datasets it "
                        f"knows by name)")
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for here, names in work_folder.walk(folder, leaving=left_out) for p in (here / n for n in names)
            if p.suffix == ".py"}


def _data(opts: Options, setting: dict[str, Any] | None, entry: dict[str, Any]) -> dict[str, Any]:
    """A script's data by profile: the first of the kit's named datasets its folder loads (CIFAR-10 where none;
    reprokit/plan/script_datasets.py), its generated stand-in on quick; or the experiment's own where its posted
    scripts run beside the kit (``setting``: the resolved profile), so both read the same file."""
    found = [] if setting else script_datasets.loaded(entry["folder"], entry["path"])
    given = setting["data"] if setting else {"dataset": script_datasets.planned(found, opts.profile)
                                             or (STAND_IN if opts.profile == "quick" else "cifar10")}
    name = opts.dataset or given["dataset"]
    if opts.dataset == STAND_IN and found:     # --dataset learnable: the stand-in of the dataset the script loads
        name = script_datasets.planned(found, "quick") or name
    request = {"dataset": name, "train_samples": given.get("train_samples"), "test_samples": given.get("test_samples"),
               "seed": setting["train"]["seed"] if setting else 0}
    opts.data.prepare(request)         # the data step, before planning reads what it prepared
    opts.data.readers_files(name)
    opts.data.others(found, name)
    prepared = opts.data.prepared(request)
    if prepared is None:
        train, test = datasets.expected_counts(request)
        return {"dataset": name, "file": None, "sha256": None, "train_samples": train, "test_samples": test,
                "tfds": None}
    return {"dataset": name, "file": prepared.file, "sha256": prepared.sha256,
            "train_samples": prepared.train_samples, "test_samples": prepared.test_samples,
            "tfds": opts.data.tfds() if name == "cifar10" else None}


def _bounds(opts: Options, epochs: int | None, setting: dict[str, Any] | None) -> tuple[dict[str, Any], int]:
    """The probe's bounds by profile; where posted scripts run beside the kit, the kit's own: its steps per
    epoch, epochs and warmup steps (counted over epochs, as the kit counts them), and evaluation over the
    whole test set, as the kit evaluates."""
    if setting:
        train = setting["train"]
        steps, default_epochs, eval_steps, warmup = (train.get("max_steps_per_epoch"), train["epochs"], None,
                                                     train["warmup_steps"])
    else:
        steps, default_epochs, eval_steps, warmup = BOUNDS[opts.profile]
    if opts.max_steps and setting:
        steps = min(steps or opts.max_steps, opts.max_steps)
    elif opts.max_steps:
        steps = eval_steps = min(steps or opts.max_steps, opts.max_steps)
        warmup = min(warmup, max(1, steps - 1))
    return {"max_steps": steps, "epochs": epochs or default_epochs, "eval_steps": eval_steps}, warmup


def specs_for(name: str, scripts: dict[str, dict[str, Any]], opts: Options,
              describe: Callable[[str], dict[str, Any]], code: dict[str, Any],
              epochs: int | None = None, variant: str = VARIANT, setting: dict[str, Any] | None = None,
              differences: list[dict[str, Any]] | None = None,
              require: dict[str, tuple[str, ...]] | None = None,
              mounts: dict[str, tuple[tuple[str, Path], ...]] | None = None,
              devices: tuple[int, ...] = (1,), given: dict[str, str] | None = None) -> list[ScriptSpec]:
    """The ScriptSpecs of one experiment's scripts (framework -> script_entry), ``opts.repeats`` each;
    ``setting``, a spec experiment's resolved profile, gives its posted scripts the kit's data and bounds;
    ``differences``, the experiment's declared ones (docs/settings.md); ``require``, --require's packages by
    framework, in place of a script's requirements file; ``mounts``, --data's folders by framework; ``devices``,
    the counts of devices a run holds (--devices), each script at each; ``given``, each --script's path as the
    command gave it. Where a script's folder sits in a git repository, its provenance has that commit too."""
    bounds, warmup = _bounds(opts, epochs, setting)
    out = []
    for framework, entry in scripts.items():
        if framework not in opts.frameworks:
            continue
        files = _files(entry["folder"], entry["left_out"])
        data = _data(opts, setting, entry)
        flag = (require or {}).get(framework)
        source = script_requirements.from_flag(framework, flag) if flag else entry["requirements"]
        requirements = script_requirements.settle(source, framework) if source else None
        # its launcher at each count: the processes it starts are the devices the run holds ({devices} reads it)
        launched = {count: launchers.for_spec(framework, entry, requirements, opts.device, count) for count in devices}
        # a notebook's install lines: left out where these requirements or the lock give them, else refused here
        notebook = entry["notebook"] and notebooks.for_spec(entry["notebook"], framework,
                                                            source.lines if source else (),
                                                            script_requirements.locked(framework))
        # before any run (a dry run's data step checks nothing): its wheels, and its imports
        opts.data.check_imports(entry["folder"], [entry["path"], *filter(None, [entry["shim"]])], framework,
                                source, requirements, describe(framework))
        script = {"path": entry["path"], "args": entry["args"], "folder": str(entry["folder"]), "files": files,
                  "shim": entry["shim"], "requirements": requirements,
                  "mounts": data_mounts.mounts_for(framework, mounts or {})}
        if notebook:
            script["notebook"] = notebook
        script |= {"module": entry["module"], "left_out": entry["left_out"]}     # python -m, and what it leaves
        source = {**provenance.scripts_git(Path(entry["folder"]), list(files)),
                  **({"script_given": given[framework]} if given and framework in given else {})}
        for count, repeat in itertools.product(devices, range(opts.repeats)):     # --devices: a run per count
            spec = {"schema": SCHEMA, "run_id": "", "experiment": name, "variant": variant, "framework": framework,
                    "profile": opts.profile, "device": opts.device, "repeat": repeat, "source": "script",
                    "script": script | ({"launcher": launched[count]} if launched[count] else {}),
                    "bounds": bounds, "data": data,
                    "measure": {"window_steps": 1 if opts.device == "cpu" else 10, "memory_every_steps": 5,
                                "step_timing": True},
                    "warmup_steps": warmup, "limits": {"timeout_s": opts.timeout_s or TIMEOUT_S[opts.profile]},
                    "differences": differences or [], "provenance": {**code, **describe(framework), **source},
                    "pitfalls": [], "pitfall_summaries": {}, "devices": count}
            out.append(identified(ScriptSpec.from_dict(spec)))     # every field explicit, or the plan has a bug
    return out

"""A report's exact specs, to run again here (`reprokit reproduce --from REPORT`): each result's spec read back
and checked, and its data prepared here and compared with the data the report ran on."""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

from reprokit.environments import datasets
from reprokit.errors import UserError
from reprokit.kits.contract.spec import RunSpec, ScriptSpec, Spec, SpecError, typed
from reprokit.plan import plan as planning
from reprokit.results import safe_names
from reprokit.results.store import Store, none_read
from reprokit.runners.base import Runner


def specs_from(folder: Path, runner: Runner, device: str, data_dir: Path, code_info: dict[str, Any],
               offline: bool) -> list[Spec]:
    """A report's exact specs, to run again here: only the environment (runner, code) is this machine's."""
    results, refused = Store(folder / "results").evidence(f"--from {folder}")
    if not results and not refused:
        raise UserError(f"--from {folder}: no result files in {folder / 'results'}; name a report folder")
    if not results:
        raise UserError(f"--from {folder}: none of its result files can be read ({none_read(refused)}); name a "
                        f"report folder this kit wrote")
    specs: list[Spec] = []
    for r in results:
        try:
            spec = typed(copy.deepcopy(r["spec"]))     # refuses a spec the kits could not read
        except (SpecError, ValueError, TypeError) as exc:
            raise UserError(f"--from {folder}: {r['run_id']}.json has a spec this kit cannot run ({exc})") from None
        for field, name in (("experiment", spec.experiment), ("variant", spec.variant)):
            if why := safe_names.problem(name):
                raise UserError(f"--from {folder}: {r['run_id']}.json: its spec's {field} {why}; this kit "
                                f"names files after it, so it cannot run it")
        if spec.device == "gpu" and device != "gpu":
            raise UserError(f"--from {folder}: the report ran on a GPU and this machine runs on its CPU; "
                            f"re-run it on a machine with a GPU (or give --gpus)")
        if isinstance(spec, ScriptSpec) and not Path(spec.script.folder, spec.script.path).is_file():
            raise UserError(f"--from {folder}: its script {spec.script.path} is not in "
                            f"{spec.script.folder} here; put the scripts' folder there and re-run")
        d = spec.data
        seed = spec.train.seed if isinstance(spec, RunSpec) else 0
        wanted = {"dataset": d.dataset, "train_samples": d.train_samples, "test_samples": d.test_samples,
                  "seed": seed, **({"input_size": spec.data.input_size, "resize": spec.data.resize,
                                    "num_classes": spec.model.num_classes} if isinstance(spec, RunSpec) else {})}
        try:            # the spec's sizes and seed reach the data generator as a report gave them
            if any(n is not None and n < 1 for n in (d.train_samples, d.test_samples)):
                raise ValueError("a sample count below 1")
            here = datasets.prepare(wanted, data_dir, allow_download=not offline)
        except (ValueError, TypeError, OverflowError) as exc:
            raise UserError(f"--from {folder}: {r['run_id']}.json names data this kit cannot prepare ({exc}); "
                            f"it cannot run it") from None
        if here.sha256 != d.sha256 or here.file != d.file:
            raise UserError(f"--from {folder}: the {d.dataset} data prepared here (sha256 {here.sha256[:12]}) is "
                            f"not the data the report ran on ({(d.sha256 or '')[:12]}); prepare the same data and "
                            f"re-run")
        spec = dataclasses.replace(spec, provenance={**code_info, **runner.describe(spec.framework)})
        specs.append(planning.identified(spec))
    return specs

"""The data step, which runs before the plan reads what it prepared (the plan's port: reprokit/plan/inputs.py):
the kit's datasets and a script's wheels on a run, nothing on a dry run; and the separate data step that needs a
framework: TFDS's cifar10 for the posted TensorFlow input, built by TFDS's own code in a kit process that the
runner starts, as every kit process is started."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from reprokit.environments import datasets, published_datasets, script_requirements
from reprokit.environments.datasets import tfds_prepared
from reprokit.environments.script_requirements import Source
from reprokit.errors import UserError
from reprokit.kits.contract.named_datasets import KNOWN
from reprokit.kits.contract.names import REGISTRY, TFDS_DATA, kit_module
from reprokit.kits.framework_free import data as kitdata
from reprokit.plan.inputs import DataStep
from reprokit.runners.base import KitCall, Runner


def tfds(cache_dir: Path, runner: Runner, work: Path) -> dict[str, Any]:
    """The separate data step for the posted TensorFlow input: TFDS's own cifar10 builder, started by the
    runner in the TensorFlow environment, fetches and checks its archive (the binary version, or
    cifar-10-binary.tar.gz placed in cache_dir) and writes its dataset into the call's own folder under
    ``work``, moved into cache_dir/tfds once it is whole. It may use the network; no timed run does."""
    out = Path(work) / "tfds-data"
    builder = next(fw for fw in REGISTRY.values() if fw.has(TFDS_DATA))
    call = KitCall(builder.name, kit_module(builder.name, TFDS_DATA), ("--data-dir", cache_dir, "--out", out),
                   output=out, timeout_s=3600.0, label="tfds-data")
    outcome = runner.run(call, lambda event: None)
    built = out / kitdata.TFDS_CIFAR10
    if outcome.exit_code != 0 or not (built / "dataset_info.json").exists():
        tail = outcome.start_error or (outcome.log_tail or ["(no output)"])[-1]
        raise UserError(f"preparing TFDS's cifar10 in {Path(cache_dir) / kitdata.TFDS_ROOT} failed ({tail}); "
                        f"reach the network, or place the official cifar-10-binary.tar.gz in {cache_dir}, "
                        f"and re-run")
    target = Path(cache_dir) / kitdata.TFDS_CIFAR10
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(built, target)            # whole or not at all: a run checks the folder's sha256
    found = tfds_prepared(cache_dir)
    assert found is not None
    return found


class LookedUp:
    """A dry run's data step (reprokit/plan/inputs.py): it prepares nothing and fetches nothing, and the plan reads
    what an earlier run prepared."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def prepare(self, request: dict[str, Any]) -> None:
        pass

    def prepared(self, request: dict[str, Any]) -> datasets.PreparedDataset | None:
        return datasets.prepared(request, self.data_dir)

    def tfds(self) -> dict[str, Any] | None:
        return tfds_prepared(self.data_dir)

    def cifar10_batches(self) -> None:
        pass

    def readers_files(self, name: str) -> None:
        pass

    def others(self, found: list[str], planned_name: str) -> None:
        pass

    def check_imports(self, folder: Path, scripts: list[str], framework: str, source: Source | None,
                      requirements: dict[str, Any] | None, facts: dict[str, Any]) -> None:
        pass


class Preparing(LookedUp):
    """A run's data step: each dataset prepared (fetched where ``allow_download``) before the plan reads it, and a
    script's wheels and imports checked before any run."""

    def __init__(self, data_dir: Path, allow_download: bool) -> None:
        super().__init__(data_dir)
        self.allow_download = allow_download

    def prepare(self, request: dict[str, Any]) -> None:
        datasets.prepare(request, self.data_dir, allow_download=self.allow_download)

    def cifar10_batches(self) -> None:
        datasets.cifar10_batches(self.data_dir, allow_download=self.allow_download)

    def readers_files(self, name: str) -> None:
        published_datasets.readers_files(name, self.data_dir, self.allow_download)   # where torchvision reads

    def others(self, found: list[str], planned_name: str) -> None:
        """On standard and full, the published datasets the script loads besides the spec's: a run reads them from
        the host's copies (a quick run generates their stand-ins itself)."""
        if planned_name in KNOWN:
            for name in found:
                if name != planned_name:
                    published_datasets.prepare(name, self.data_dir, self.allow_download)

    def check_imports(self, folder: Path, scripts: list[str], framework: str, source: Source | None,
                      requirements: dict[str, Any] | None, facts: dict[str, Any]) -> None:
        script_requirements.check_imports(folder, scripts, framework, source, requirements, facts)


def for_run(data_dir: Path, dry_run: bool, offline: bool) -> DataStep:
    """The data step a command plans with: a dry run only looks up; a run prepares, fetching unless offline."""
    return LookedUp(data_dir) if dry_run else Preparing(data_dir, allow_download=not offline)

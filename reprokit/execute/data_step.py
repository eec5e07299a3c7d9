"""The separate data step that needs a framework: TFDS's cifar10 for the posted TensorFlow input, built by
TFDS's own code in a kit process that the runner starts, as every kit process is started."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from kits.common import data as kitdata
from reprokit.environments.datasets import tfds_prepared
from reprokit.errors import UserError
from reprokit.runners.base import KitCall, Runner


def tfds(cache_dir: Path, runner: Runner, work: Path) -> dict[str, Any]:
    """The separate data step for the posted TensorFlow input: TFDS's own cifar10 builder, started by the
    runner in the TensorFlow environment, fetches and checks its archive (the binary version, or
    cifar-10-binary.tar.gz placed in cache_dir) and writes its dataset into the call's own folder under
    ``work``, moved into cache_dir/tfds once it is whole. It may use the network; no timed run does."""
    out = Path(work) / "tfds-data"
    call = KitCall("tensorflow", "kits.tensorflow_kit.tfds_data", ("--data-dir", cache_dir, "--out", out),
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

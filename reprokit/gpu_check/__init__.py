"""scripts/gpu_check's check, once its bootstrap found the host packages (here or from a wheelhouse): the plan,
the PyTorch kit on the seeds' speed and memory cases, the evidence printed after them and the verdict.

Its modules, each importing only modules further down this list:

    check           main(): the plan, the runs, the evidence after them, the time against the target, the exit status
    tuned_and_jax   apart from the target: PyTorch's tuned variant on ResNet-50, the JAX kit where JAX is installed
    reruns          the timed runs' specs again: the warmup twin, the certificate's PyTorch half, the kit's cost
    plan            the `reprokit reproduce` command it runs, and its plan with an estimate for each run
    probed_scripts  scripts the kit did not write, under the probe: seed 000's posted one, a corpus one, a CPU model

The lines it prints from result files are the report's (reprokit/report/gpu_check_lines.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol

from reprokit import places, resources
from reprokit.errors import UserError


class Options(Protocol):
    """What the check reads of its command line; scripts/gpu_check parses it, before any of reprokit is
    importable (the host packages may still be missing there)."""

    python: str
    name: str
    timeout: float
    state_dir: Path
    reports_dir: Path
    wheelhouse: Path | None
    cpu_dry_run: bool
    plan_only: bool
    no_tuned: bool
    gpu_name: str


def say(line: str = "") -> None:
    print(line, flush=True)


def clone() -> Path:
    """The clone the check runs from: it runs scripts of the tests' corpus, which only a clone has."""
    top = resources.checkout()
    if top is None:
        raise UserError("the GPU check runs scripts of the tests' corpus, which only a clone of reprokit has: clone "
                        "the repository and run scripts/gpu_check there.")
    return top


def given(extra: list[str], flag: str) -> str | None:
    """A folder given to `reprokit reproduce` after --, as is."""
    return extra[extra.index(flag) + 1] if flag in extra else None


def reports_dir(args: Options, extra: list[str]) -> Path:
    """Where the check's commands write their reports: --reports-dir after --, else the check's own."""
    return Path(given(extra, "--reports-dir") or args.reports_dir)


def data_dir(extra: list[str]) -> Path:
    """Where the check's commands read their data: --data-dir after --, else the kit's data cache."""
    return Path(given(extra, "--data-dir") or places.DATA).resolve()


def folders(args: Options, extra: list[str]) -> list[str]:
    """The folders every command of the check is given: the check's reports folder, and the data folder where one
    was given after --."""
    data = given(extra, "--data-dir")
    return ["--reports-dir", str(reports_dir(args, extra)), *(["--data-dir", data] if data else [])]

"""Where a matrix runs, beside how each run starts (the runner): this host's slots, or a Ray cluster's nodes.

An executor is given the runner, the runs still to do and the store, runs them and
stores each result the moment it ends. The CLI talks only to this protocol, so a
Slurm or Kubernetes executor is one more class, not more branches.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from reprokit.console import RunProgress
from reprokit.environments.topology import Placement
from reprokit.kits.contract.spec import Spec
from reprokit.results.store import Store
from reprokit.runners import container_limits
from reprokit.runners.base import Runner

if TYPE_CHECKING:
    from reprokit.execute.node_tasks import Job

ProgressFor = Callable[[int, Spec], RunProgress]


class Executor(Protocol):
    name: str

    @property
    def at_once(self) -> int:
        """Runs that may go at once (for the time estimate)."""

    def describe(self, runner: Runner) -> str:
        """Where the runs go, for the plan's first line."""

    def builds(self, runner: Runner, frameworks: set[str]) -> list[str]:
        """What prepare() will build on this host first (for the time estimate)."""

    def prepare(self, runner: Runner, frameworks: set[str]) -> None:
        """Build or check what the runs need here; raise UserError before any run."""

    def run(self, runner: Runner, todo: Sequence[Spec], store: Store, progress_for: ProgressFor) -> tuple[int, bool]:
        """Run every spec, storing each result as it ends; (failed runs, interrupted)."""

    def untimed(self, runner: Runner) -> Runner:
        """The runner of the kit processes that are no timed run (a certificate's sides), on this host: each call
        holds the devices a timed run holds and stands in the ledger (reprokit/execute/untimed.py)."""


def _at_once(n: int) -> str:
    return f", up to {n} at once" if n > 1 else ""


@dataclass
class HostExecutor:
    """This host: one run at a time with every assigned GPU, or one per ``--parallel`` slot. Each timed run holds
    the host-wide lock of its devices (reprokit/execute/locks.py): ``gpus`` are the assigned GPUs' UUIDs, which a
    run without a slot times on (None: every GPU of the host, the safe side where they are not known)."""
    work: Path
    ledger: Path
    slots: list[Placement | None] = field(default_factory=lambda: [None])
    gpus: tuple[str, ...] | None = None
    device: str = "cpu"
    name: str = "host"
    at_most: int | None = None      # runs at once in the slots (--parallel); None: one per slot
    widest: int = 1                 # the most devices a run holds (--devices): it takes that many slots
    models: dict[str, str] | None = None    # --mixed-gpus: each GPU's model by UUID, which each result declares

    @property
    def at_once(self) -> int:
        if self.slots == [None]:
            return 1
        return max(1, min(self.at_most or len(self.slots), len(self.slots) // self.widest))

    def describe(self, runner: Runner) -> str:
        return f"backend {runner.name}{_at_once(self.at_once)}"

    def builds(self, runner: Runner, frameworks: set[str]) -> list[str]:
        return runner.missing(frameworks)

    def prepare(self, runner: Runner, frameworks: set[str]) -> None:
        runner.prepare(frameworks)

    def run(self, runner: Runner, todo: Sequence[Spec], store: Store, progress_for: ProgressFor) -> tuple[int, bool]:
        from reprokit.execute import schedule
        return schedule.run_all(runner, todo, self.slots, self.work, self.ledger, store, progress_for, self.gpus,
                                self.at_most, self.models)

    def untimed(self, runner: Runner) -> Runner:
        from reprokit.execute import untimed
        return untimed.Gated(runner, self.device, self.ledger, self.gpus)


@dataclass
class RayExecutor:
    """The nodes of an existing Ray cluster, each running a run with its own runner (reprokit/execute/cluster.py)."""
    address: str
    serving: list[str]          # the nodes that can serve a run
    at_once: int
    device: str
    data_dir: Path
    ledger: Path                # this host's, for the kit processes it runs itself (the certificates)
    experiment_dirs: tuple[Path, ...] = ()
    memory_limit: str = "auto"  # --memory-limit, for each node's containers
    name: str = "ray"

    def describe(self, runner: Runner) -> str:
        return f"backend ray ({runner.name} on the nodes){_at_once(self.at_once)}"

    def builds(self, runner: Runner, frameworks: set[str]) -> list[str]:
        return [] if runner.name == "local" else runner.missing(frameworks)    # nodes build their own virtualenvs

    def prepare(self, runner: Runner, frameworks: set[str]) -> None:
        container_limits.memory_option(self.memory_limit)   # refused here, not on every node
        if runner.name != "local":           # the images are built here, then streamed to the nodes
            runner.prepare(frameworks)

    def job(self, runner: Runner, head: Any, images: dict[str, dict[str, str]]) -> Job:
        """What every node's task is given: the runner kind and its options, the head's handle, the images."""
        from reprokit.execute import node_tasks
        return node_tasks.Job(runner.name, self.device, head, images, tuple(str(d) for d in self.experiment_dirs),
                              self.memory_limit)

    def run(self, runner: Runner, todo: Sequence[Spec], store: Store, progress_for: ProgressFor) -> tuple[int, bool]:
        from reprokit.execute import cluster, node_staging
        data_files = {s.data.file: self.data_dir / s.data.file for s in todo if s.data.file}
        head, images = cluster.stage_on_head(runner, {s.framework for s in todo}, data_files,
                                             node_staging.script_files(todo))
        return cluster.run_all(self.job(runner, head, images), todo, self.serving, store, progress_for)

    def untimed(self, runner: Runner) -> Runner:
        from reprokit.execute import untimed
        return untimed.Gated(runner, self.device, self.ledger)

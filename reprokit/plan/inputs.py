"""What planning asks of the data step, as a port: the plan names the data a run reads, and the composition root
(reprokit/execute/compose.py) decides whether that data is prepared first (a run) or only looked up (a dry run).

A spec's id covers its data's sha256, so the plan reads what is prepared; it never prepares anything itself
(reprokit/execute/data_step.py does, before the plan reads it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from reprokit.environments.datasets import PreparedDataset
from reprokit.environments.script_requirements import Source


class DataStep(Protocol):
    """Each call comes before the plan reads what it prepares; a dry run's step prepares nothing."""

    def prepare(self, request: dict[str, Any]) -> None:
        """The dataset a run reads (reprokit/environments/datasets.py's request), as the kit's .npz."""

    def prepared(self, request: dict[str, Any]) -> PreparedDataset | None:
        """The dataset as prepared, or None where it is not (yet): a dry run's spec waits for its checksum."""

    def tfds(self) -> dict[str, Any] | None:
        """TFDS's own cifar10 where its separate data step built it, else None."""

    def cifar10_batches(self) -> None:
        """CIFAR-10's extracted batches, which a posted torchvision reader reads."""

    def readers_files(self, name: str) -> None:
        """The published files a run links for the frameworks' own readers of a named dataset."""

    def others(self, found: list[str], planned_name: str) -> None:
        """The other named datasets a script's folder loads, beside the one its spec names."""

    def check_imports(self, folder: Path, scripts: list[str], framework: str, source: Source | None,
                      requirements: dict[str, Any] | None, facts: dict[str, Any]) -> None:
        """A script's extra wheels fetched, and each module it imports that its environment lacks refused."""

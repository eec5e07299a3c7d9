"""What the kit's entry points ask of each part of a framework's kit, and the one place they are looked up.

A framework's kit package has the modules names.PARTS names (reprokit/kits/contract/names.py): ``backend`` (its
``Backend``, whose protocol is reprokit/kits/training_loop/backend.py), ``certify`` (its ``Certifier``), ``probe`` (its
``Probe``) and ``bare`` (the module itself: ``loop`` and ``process_setup``). The Protocols below hold
only what reprokit/kits/run.py, reprokit/kits/certify.py, reprokit/kits/probe.py and reprokit/kits/bench.py use of them,
with the types they use, and the loaders find a part by its registry entry (names.kit_module), so that a new framework
is its folder and its entry, and no entry point looks a module up by string. Standard library and numpy only:
the kits import this in every image.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from reprokit.kits.contract.names import kit_module
from reprokit.kits.training_loop.backend import Backend

if TYPE_CHECKING:
    from reprokit.kits.contract.spec import RunSpec
    from reprokit.kits.framework_free.data import Arrays
    from reprokit.kits.framework_free.model_call import ModelCall
    from reprokit.kits.observation.observe import Observer
    from reprokit.kits.training_loop.staged_data import StagedData


# Members the callers only read are properties: a plain attribute here would also ask that the callers may set it,
# which refuses an implementation whose attribute has a narrower type (a tuple of eight strings for HOOKS).

class Traced(Protocol):
    @property
    def ops(self) -> list[dict[str, Any]]:
        """The canonical convolutions and matrix products of one forward pass."""


class CanonicalModel(Protocol):
    """A model in the certificate's canonical form (reprokit/kits/framework_free/certificate.py): what
    reprokit/kits/certify.py reads of the kit's own model (a ``Certifier``) and of a model a script trains (a probe's
    ``captured``) alike."""

    @property
    def who(self) -> str | None:
        """Which builder made it, in words."""

    @property
    def optimizer(self) -> dict[str, Any]:
        """The optimizer, read back from the object."""

    @property
    def trace(self) -> Traced: ...

    def environment(self) -> dict[str, Any]: ...

    def records(self) -> list[dict[str, Any]]:
        """Per-layer parameter names, canonical shapes and counts."""

    def last_layer(self) -> str: ...

    def expects_logits(self) -> bool | None:
        """Whether its loss takes logits; None where that was not seen."""

    def export(self) -> dict[str, np.ndarray]:
        """Its weights, by canonical name."""

    def load(self, weights: dict[str, np.ndarray]) -> None: ...

    def dropout_off(self) -> None: ...

    def logits(self, x: np.ndarray, training: bool) -> list[list[float]]: ...

    def train_outputs(self, x: np.ndarray, passes: int) -> list[list[list[float]]]:
        """Training-mode outputs over ``passes`` passes, dropout on."""

    def layer_outputs(self, x: np.ndarray, training: bool) -> list[tuple[dict[str, Any], np.ndarray]]:
        """Every layer's settings and output."""


class CertifySide(CanonicalModel, Protocol):
    """A kit's ``certify.Certifier(spec, arrays, x_trace)``: the kit's own model, optimizer and loss for the
    spec, built and traced once (reprokit/kits/framework_free/certificate.py's ``Side``), and its steps."""

    def _build(self) -> None:
        """Build the model and optimizer again (a fresh optimizer), in the dtype in force."""

    def use_float64(self) -> None:
        """Build the same model and optimizer again, in float64."""

    def neutralisable(self) -> list[dict[str, Any]]:
        """The declared optimizer differences this side removes from every trajectory, each named."""

    def kit_train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]], perturb: bool = False) -> list[float]:
        """The kit's own train_step (fp32) on each batch; with ``perturb``, its inputs one float32 ulp up."""

    def train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]],
                     gradients: list[dict[str, np.ndarray]] | None = None) -> list[float]:
        """The certificate's reference step in the model's dtype; each step's canonical gradients appended
        to ``gradients`` where given."""

    def training_loss(self, x: np.ndarray, y: np.ndarray) -> float:
        """A batch's loss in training mode, without an update."""

    def reset(self) -> None:
        """Leave nothing behind for the next certificate in this process."""


class CapturedSide(CanonicalModel, Protocol):
    """The model a script trains, captured by its probe before the first update (``Probe.captured``)."""

    @property
    def framework(self) -> str: ...

    @property
    def call(self) -> ModelCall:
        """How the script called its model at its first step, which every pass of the certificate replays."""

    @property
    def x_first(self) -> np.ndarray:
        """The first samples of its first batch: the certificate's fixed batch."""

    @property
    def x_trace(self) -> np.ndarray:
        """The samples its trace ran on."""

    def shared(self) -> list[str]:
        """Layers it calls more than once."""

    def modes(self) -> dict[str, Any]:
        """Each layer's mode as the script trained it."""


class Probe(Protocol):
    """A kit's ``probe.Probe(script_dir)``: the observation hooks reprokit/kits/probe.py installs under a user's script.

    reprokit/kits/probe.py also reads, where a probe has them: ``bound_shims()`` (the bounds on the framework's own
    loops, as declared shims), ``own_input`` (after ``captured``: the model did not take the PyTorch side's
    batch), ``pipeline_note``, ``notes``, ``compilations``; and reprokit/kits/ranks/process.py ``group`` (its process
    group: rank, ranks, collectives' backend) and ``replicas()`` (the devices one process's model is split over)."""
    certifying: bool              # the certificate's own passes run: not the script's (reprokit/kits/probe.py sets it)

    @property
    def HOOKS(self) -> tuple[str, ...]:     # the implementations' class constant
        """What it hooks, in words, for the result."""

    @property
    def models(self) -> list[str]:
        """Every model an optimizer stepped."""

    @property
    def others(self) -> list[str]:
        """Models beside the trained one that an optimizer steps."""

    def stage_data(self, named: StagedData, tfds_root: Path | None, /) -> list[str]:
        """Show the named datasets where the framework's loaders look; the shims, declared."""

    def gpu_counters(self) -> list[Any]:
        """The framework's allocator peak counters (reprokit/kits/measurement/phases.py)."""

    def sync(self) -> None: ...

    def memory_now(self) -> int: ...

    def install(self, observer: Observer) -> None: ...

    def at_first_update(self, call: Callable[[], None]) -> None:
        """``call()`` at the first optimizer step, before it changes the weights."""

    def captured(self, other_input: np.ndarray | None, /) -> CapturedSide:
        """The trained model in the certificate's canonical form; ``other_input`` the PyTorch side's batch."""

    def finish(self) -> None: ...

    def as_float(self, value: Any) -> float: ...

    def on_gpu(self) -> bool: ...

    def device_ids(self) -> tuple[str | None, str | None]:
        """The model's device's UUID and PCI bus id, for NVML."""

    def input_reader(self) -> str | None: ...

    def memory_series(self) -> str: ...

    def parameters(self) -> dict[str, Any]: ...

    def layers(self) -> list[str]: ...

    def environment(self) -> dict[str, Any]: ...

    def sync_meaning(self) -> str: ...

    def eager_loop(self) -> bool: ...


class BareLoop(Protocol):
    """A kit's ``bare`` module: the bench's bare loop (reprokit/kits/bench.py)."""

    def loop(self, spec: RunSpec, arrays: Arrays, warmup: int, steps: int) -> tuple[float, float]:
        """Wall and process CPU seconds of ``steps`` steps after ``warmup``."""

    def process_setup(self, spec: RunSpec) -> None:
        """Once per process, before any run: what the kit sets once (thread pools)."""


def _part(framework: str, part: str) -> ModuleType:
    return importlib.import_module(kit_module(framework, part))


def backend(spec: RunSpec) -> Backend:
    made: Backend = _part(spec.framework, "backend").Backend(spec)
    return made


def certifier(spec: RunSpec, arrays: Arrays, x_trace: np.ndarray) -> CertifySide:
    made: CertifySide = _part(spec.framework, "certify").Certifier(spec, arrays, x_trace)
    return made


def probe(framework: str, script_dir: Path) -> Probe:
    made: Probe = _part(framework, "probe").Probe(script_dir)
    return made


def bare_loop(framework: str) -> BareLoop:
    return cast(BareLoop, _part(framework, "bare"))

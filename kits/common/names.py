"""Names both sides share: the framework registry, and the built-in models' layouts.

Dependency-free, so the kits (standard library, numpy and one framework) and the
host import the same definitions.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    """One framework's entry. Its kit package holds ``backend`` (the training run), ``certify`` (its side of
    the certificate), ``probe`` (a user's script under observation) and ``bare`` (the bench's bare loop); its
    lock files are ``locks/<name>*.txt`` (named in ``docker/bases.toml``), its image ``docker/<name>.Dockerfile``."""
    name: str
    label: str            # how people write it
    package: str          # its kit, e.g. kits.pytorch_kit
    colour: str           # its bars in the report's plots (Okabe-Ito, which colour-blind readers tell apart)


REGISTRY = {fw.name: fw for fw in (
    Framework("pytorch", "PyTorch", "kits.pytorch_kit", "#0072B2"),
    Framework("tensorflow", "TensorFlow", "kits.tensorflow_kit", "#E69F00"),
)}
FRAMEWORKS = tuple(REGISTRY)
LABELS = {name: fw.label for name, fw in REGISTRY.items()}
# A kit prints progress as this marker and one JSON object per line; runners route those lines.
PROGRESS_MARKER = "REPROKIT-PROGRESS "
# Every container and image the kit makes carries this label (=1), so leftovers can be found.
CONTAINER_LABEL = "reprokit"

# Conv widths per block before width_multiplier: VGG16 configuration D, and the seed 004 SimpleCNN.
VGG16_BLOCKS = [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]]
SIMPLECNN_BLOCKS = [[64, 64], [128, 128], [256, 256, 256], [512, 512], [512]]


def label(framework: str) -> str:
    return LABELS.get(framework, framework)


def kit_module(framework: str, part: str) -> str:
    """The module of a framework's kit that does ``part`` (backend, certify, probe, bare)."""
    return f"{REGISTRY[framework].package}.{part}"


def scaled_width(channels: int, multiplier: float) -> int:
    """A layer's width at the profile's width_multiplier (at least one channel)."""
    return max(1, int(round(channels * multiplier)))

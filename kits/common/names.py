"""Names both sides share: the frameworks, how people read them, and the built-in models' layouts.

Dependency-free, so the kits (standard library, numpy and one framework) and the
host import the same definitions.
"""
from __future__ import annotations

FRAMEWORKS = ("pytorch", "tensorflow")
LABELS = {"pytorch": "PyTorch", "tensorflow": "TensorFlow"}
# A kit prints progress as this marker and one JSON object per line; runners route those lines.
PROGRESS_MARKER = "REPROKIT-PROGRESS "
# Every container and image the kit makes carries this label (=1), so leftovers can be found.
CONTAINER_LABEL = "reprokit"

# Conv widths per block before width_multiplier: VGG16 configuration D, and the seed 004 SimpleCNN.
VGG16_BLOCKS = [[64, 64], [128, 128], [256, 256, 256], [512, 512, 512], [512, 512, 512]]
SIMPLECNN_BLOCKS = [[64, 64], [128, 128], [256, 256, 256], [512, 512], [512]]


def label(framework: str) -> str:
    return LABELS.get(framework, framework)


def scaled_width(channels: int, multiplier: float) -> int:
    """A layer's width at the profile's width_multiplier (at least one channel)."""
    return max(1, int(round(channels * multiplier)))

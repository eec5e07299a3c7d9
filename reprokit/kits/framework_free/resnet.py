"""ResNet-50's layout, framework-free: both kits build it from this, the host counts its FLOPs and weights.

The layout is torchvision's ``resnet50`` (He et al. 2016, bottleneck blocks of 3, 4, 6 and 3): a 7x7
stride-2 stem, a 3x3 stride-2 max pool, then per stage bottlenecks of a 1x1, a 3x3 and a 1x1 convolution
(4x the inner width out), each convolution followed by BatchNorm, without biases; the first block of a
stage projects its input with a strided 1x1 convolution and BatchNorm. ``stride_at`` places a stage's
stride: ``3x3`` in the middle convolution (torchvision, NVIDIA's "v1.5"), ``1x1`` in the first one
(the paper's "v1", as ``keras.applications.ResNet50``). Every width scales with ``width_multiplier``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reprokit.kits.contract.names import scaled_width

BLOCKS = (3, 4, 6, 3)
STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))      # (inner width, stride of the stage's first block)
EXPANSION = 4
STEM_WIDTH = 64
STRIDE_AT = ("3x3", "1x1")


@dataclass(frozen=True)
class Conv:
    kernel: int
    stride: int
    cin: int
    cout: int

    @property
    def padding(self) -> int:
        return self.kernel // 2               # torchvision pads k // 2 on every side

    def out_size(self, size: int) -> int:
        return (size + 2 * self.padding - self.kernel) // self.stride + 1


@dataclass(frozen=True)
class Block:
    convs: tuple[Conv, Conv, Conv]
    downsample: Conv | None


@dataclass(frozen=True)
class Layout:
    stem: Conv
    stages: tuple[tuple[Block, ...], ...]

    @property
    def features(self) -> int:
        return self.stages[-1][-1].convs[-1].cout


def options(raw: dict[str, Any]) -> tuple[tuple[int, ...], str]:
    """The spec's model.options for a ResNet: its blocks per stage and where a stage strides."""
    return tuple(int(b) for b in raw["blocks"]), str(raw["stride_at"])


def layout(width_multiplier: float, blocks: Sequence[int] = BLOCKS, stride_at: str = "3x3") -> Layout:
    def width(c: int) -> int:
        return scaled_width(c, width_multiplier)

    stem = Conv(7, 2, 3, width(STEM_WIDTH))
    channels = stem.cout
    stages = []
    for (inner, stage_stride), count in zip(STAGES, blocks):
        stage = []
        for i in range(count):
            stride = stage_stride if i == 0 else 1
            mid, out = width(inner), width(inner * EXPANSION)
            first, middle = (1, stride) if stride_at == "3x3" else (stride, 1)
            convs = (Conv(1, first, channels, mid), Conv(3, middle, mid, mid), Conv(1, 1, mid, out))
            down = Conv(1, stride, channels, out) if stride != 1 or channels != out else None
            stage.append(Block(convs, down))
            channels = out
        stages.append(tuple(stage))
    return Layout(stem, tuple(stages))


def pool_out(size: int) -> int:
    """The stem's max pool: window 3, stride 2, padding 1."""
    return (size + 2 - 3) // 2 + 1


def convs_at(lay: Layout, input_size: int) -> list[tuple[Conv, int]]:
    """Every convolution with the side of its output, in the order torchvision's forward runs them
    (a block's projection after its third convolution)."""
    size = lay.stem.out_size(input_size)
    out = [(lay.stem, size)]
    size = pool_out(size)
    for stage in lay.stages:
        for block in stage:
            inside = size
            for conv in block.convs:
                inside = conv.out_size(inside)
                out.append((conv, inside))
            if block.downsample is not None:
                out.append((block.downsample, block.downsample.out_size(size)))
            size = inside
    return out

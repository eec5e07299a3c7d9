"""The spec's models in PyTorch, built layer for layer like the Keras ones.

``pitfalls`` rebuilds what the seed posts wrote instead (see reprokit/kits/contract/pitfalls.py).
"""
from __future__ import annotations

import torch
from torch import nn

from reprokit.kits.contract.names import SIMPLECNN_BLOCKS, VGG16_BLOCKS, scaled_width
from reprokit.kits.contract.pitfalls import Pitfall, Pitfalls
from reprokit.kits.contract.spec import Init, Model
from reprokit.kits.framework_free import custom, resnet


def _init(model: nn.Module, init: Init) -> None:
    kinds = {"glorot_uniform": nn.init.xavier_uniform_,
             # bound sqrt(6 / fan_in), the same distribution as Keras's he_uniform
             "he_uniform": lambda w: nn.init.kaiming_uniform_(w, nonlinearity="relu")}
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            kinds[init.conv if isinstance(module, nn.Conv2d) else init.dense](module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def vgg16(cfg: Model, input_size: int, pitfalls: Pitfalls) -> nn.Module:
    layers: list[nn.Module] = []
    channels = 3
    for block in VGG16_BLOCKS:
        for width in block:
            out = scaled_width(width, cfg.width_multiplier)
            layers += [nn.Conv2d(channels, out, 3, padding=1), nn.ReLU(inplace=True)]
            channels = out
        layers.append(nn.MaxPool2d(2, 2))
    spatial = input_size // 32
    hidden = cfg.classifier_width
    classes = 1000 if pitfalls.has(Pitfall.PT_HEAD_1000) else cfg.num_classes
    layers += [
        nn.Flatten(),
        nn.Linear(channels * spatial * spatial, hidden), nn.ReLU(inplace=True), nn.Dropout(cfg.dropout),
        nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Dropout(cfg.dropout),
        nn.Linear(hidden, classes),
    ]
    return nn.Sequential(*layers)


def simplecnn(cfg: Model, pitfalls: Pitfalls) -> nn.Module:
    """Conv-ReLU-Dropout-BatchNorm blocks as posted; one BatchNorm per conv, logits out."""
    p12, p34, p5 = cfg.dropout
    rates = [p12, p12, p34, p34, p5]
    channel_dropout = cfg.dropout_kind == "channel" or pitfalls.has(Pitfall.PT_DROPOUT2D)
    drop = nn.Dropout2d if channel_dropout else nn.Dropout
    bn = cfg.batchnorm
    shared: dict[int, nn.BatchNorm2d] = {}     # the post's Batchnorm_1..4, one per width

    def batchnorm(width: int) -> nn.BatchNorm2d:
        made = nn.BatchNorm2d(width, eps=bn.epsilon, momentum=1.0 - bn.momentum_keep)
        return shared.setdefault(width, made) if pitfalls.has(Pitfall.PT_SHARED_BATCHNORM) else made

    layers: list[nn.Module] = []
    channels = 3
    for i, block in enumerate(SIMPLECNN_BLOCKS):
        for width in block:
            out = scaled_width(width, cfg.width_multiplier)
            layers += [nn.Conv2d(channels, out, 3, padding=1), nn.ReLU(inplace=True), drop(rates[i]), batchnorm(out)]
            channels = out
        # The last block pools by averaging (the post's AvgPool2d / GlobalAveragePooling2D).
        layers.append(nn.MaxPool2d(2, 2) if i < len(SIMPLECNN_BLOCKS) - 1 else nn.AdaptiveAvgPool2d(1))
    layers += [nn.Flatten(), nn.Dropout(p5), nn.Linear(channels, cfg.num_classes)]
    if pitfalls.has(Pitfall.PT_RELU_LOGITS):
        layers += [nn.ReLU(), nn.Dropout(p5)]      # x = dropout1d(F.relu(self.fc(x)))
    if pitfalls.has(Pitfall.PT_SOFTMAX_BEFORE_CE):
        layers.append(nn.Softmax(dim=1))           # x = F.softmax(x), then CrossEntropyLoss
    return nn.Sequential(*layers)


def _conv(c: resnet.Conv) -> nn.Conv2d:
    return nn.Conv2d(c.cin, c.cout, c.kernel, c.stride, c.padding, bias=False)


class Bottleneck(nn.Module):
    """torchvision.models.resnet.Bottleneck: its modules, their names and its forward's order, at any width."""

    def __init__(self, block: resnet.Block, norm) -> None:
        super().__init__()
        c1, c2, c3 = block.convs
        self.conv1, self.bn1 = _conv(c1), norm(c1.cout)
        self.conv2, self.bn2 = _conv(c2), norm(c2.cout)
        self.conv3, self.bn3 = _conv(c3), norm(c3.cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (nn.Sequential(_conv(block.downsample), norm(block.downsample.cout))
                           if block.downsample else None)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += x if self.downsample is None else self.downsample(x)
        return self.relu(out)


class ResNet(nn.Module):
    """torchvision.models.resnet.ResNet's modules and names (``resnet50(num_classes=...)`` at full width)."""

    def __init__(self, cfg: Model) -> None:
        super().__init__()
        lay = resnet.layout(cfg.width_multiplier, *resnet.options(cfg.options))
        bn = cfg.batchnorm

        def norm(width: int) -> nn.BatchNorm2d:
            return nn.BatchNorm2d(width, eps=bn.epsilon, momentum=1.0 - bn.momentum_keep)

        self.conv1, self.bn1 = _conv(lay.stem), norm(lay.stem.cout)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        for i, stage in enumerate(lay.stages, 1):
            setattr(self, f"layer{i}", nn.Sequential(*(Bottleneck(b, norm) for b in stage)))
        self.stages = len(lay.stages)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(lay.features, cfg.num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(1, self.stages + 1):
            x = getattr(self, f"layer{i}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(cfg: Model, input_size: int, pitfalls: Pitfalls = Pitfalls()) -> nn.Module:
    if cfg.name == "custom":
        # The user's builder owns its layers and initialisation.
        return custom.build(cfg.builder("pytorch"), cfg.options, input_size, cfg.num_classes, nn.Module,
                            "torch.nn.Module", "PyTorch")
    model = (vgg16(cfg, input_size, pitfalls) if cfg.name == "vgg16" else ResNet(cfg) if cfg.name == "resnet50"
             else simplecnn(cfg, pitfalls))
    _init(model, cfg.init)
    return model



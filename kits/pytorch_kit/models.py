"""The spec's models in PyTorch, built layer for layer like the Keras ones.

``pitfalls`` rebuilds what the seed posts wrote instead (see kits/common/pitfalls.py).
"""
from __future__ import annotations

from torch import nn

from kits.common import custom
from kits.common.names import SIMPLECNN_BLOCKS, VGG16_BLOCKS, scaled_width
from kits.common.pitfalls import Pitfall, Pitfalls
from kits.common.spec import Init, Model


def _init(model: nn.Module, init: Init) -> None:
    kinds = {"glorot_uniform": nn.init.xavier_uniform_,
             # bound sqrt(6 / fan_in), the same distribution as Keras's he_uniform
             "he_uniform": lambda w: nn.init.kaiming_uniform_(w, nonlinearity="relu")}
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            kinds[init.conv if isinstance(module, nn.Conv2d) else init.dense](module.weight)
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


def build(cfg: Model, input_size: int, pitfalls: Pitfalls = Pitfalls()) -> nn.Module:
    if cfg.name == "custom":
        # The user's builder owns its layers and initialisation.
        return custom.build(cfg.builder("pytorch"), cfg.options, input_size, cfg.num_classes, nn.Module,
                            "torch.nn.Module", "PyTorch")
    model = vgg16(cfg, input_size, pitfalls) if cfg.name == "vgg16" else simplecnn(cfg, pitfalls)
    _init(model, cfg.init)
    return model



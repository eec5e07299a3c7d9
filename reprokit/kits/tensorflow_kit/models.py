"""The spec's models in Keras 3, built layer for layer like the PyTorch ones."""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import layers

from reprokit.kits.contract.names import SIMPLECNN_BLOCKS, VGG16_BLOCKS, scaled_width
from reprokit.kits.contract.pitfalls import Pitfall, Pitfalls
from reprokit.kits.contract.spec import Init, Model
from reprokit.kits.framework_free import custom, resnet

_INITS = {"glorot_uniform": "glorot_uniform", "he_uniform": "he_uniform"}


def _conv(out: int, init: Init) -> layers.Conv2D:
    return layers.Conv2D(out, 3, padding="same", kernel_initializer=_INITS[init.conv],
                         bias_initializer=init.bias)


def _dense(out: int, init: Init) -> layers.Dense:
    return layers.Dense(out, kernel_initializer=_INITS[init.dense], bias_initializer=init.bias)


def vgg16(cfg: Model, input_size: int) -> keras.Model:
    init = cfg.init
    x = inputs = keras.Input((input_size, input_size, 3))
    for block in VGG16_BLOCKS:
        for width in block:
            x = layers.ReLU()(_conv(scaled_width(width, cfg.width_multiplier), init)(x))
        x = layers.MaxPooling2D(2, 2)(x)
    x = layers.Flatten()(x)
    for _ in range(2):
        x = layers.Dropout(cfg.dropout)(layers.ReLU()(_dense(cfg.classifier_width, init)(x)))
    return keras.Model(inputs, _dense(cfg.num_classes, init)(x), name="vgg16")


def posted_vgg16(cfg: Model, input_size: int) -> keras.Model:
    """Seed 000's Keras model, ``applications.vgg16.VGG16(input_shape=..., weights=None, classes=10)``.

    At the seed's size (full width, 4096-wide classifier) it is that very call. At a profile's smaller
    width it is the same structure, layer for layer and name for name: Conv2D with its ReLU inside and
    Keras's default initializers (glorot_uniform, zero bias), Flatten, two ReLU Dense layers without
    Dropout, and a softmax Dense head.
    """
    if cfg.width_multiplier == 1.0 and cfg.classifier_width == 4096:
        return keras.applications.vgg16.VGG16(input_shape=(input_size, input_size, 3), weights=None,
                                              classes=cfg.num_classes)
    return posted_vgg16_structure(cfg, input_size)


def posted_vgg16_structure(cfg: Model, input_size: int) -> keras.Model:
    """keras.applications' VGG16 (include_top, no weights) rebuilt at any width, layer for layer."""
    x = inputs = keras.Input((input_size, input_size, 3))
    for b, block in enumerate(VGG16_BLOCKS, 1):
        for c, width in enumerate(block, 1):
            x = layers.Conv2D(scaled_width(width, cfg.width_multiplier), 3, padding="same", activation="relu",
                              name=f"block{b}_conv{c}")(x)
        x = layers.MaxPooling2D(2, 2, name=f"block{b}_pool")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(cfg.classifier_width, activation="relu", name="fc1")(x)
    x = layers.Dense(cfg.classifier_width, activation="relu", name="fc2")(x)
    return keras.Model(inputs, layers.Dense(cfg.num_classes, activation="softmax", name="predictions")(x),
                       name="vgg16")


def simplecnn(cfg: Model, input_size: int, pitfalls: Pitfalls) -> keras.Model:
    """Conv-ReLU-Dropout-BatchNorm blocks as posted, one BatchNorm per conv, logits out."""
    init, bn = cfg.init, cfg.batchnorm
    p12, p34, p5 = cfg.dropout
    rates = [p12, p12, p34, p34, p5]
    x = inputs = keras.Input((input_size, input_size, 3))
    for i, block in enumerate(SIMPLECNN_BLOCKS):
        for width in block:
            x = layers.ReLU()(_conv(scaled_width(width, cfg.width_multiplier), init)(x))
            # Channel dropout drops whole feature maps, as torch's Dropout2d does.
            x = (layers.SpatialDropout2D(rates[i]) if cfg.dropout_kind == "channel"
                 else layers.Dropout(rates[i]))(x)
            x = layers.BatchNormalization(momentum=bn.momentum_keep, epsilon=bn.epsilon)(x)
        x = layers.MaxPooling2D(2, 2)(x) if i < len(SIMPLECNN_BLOCKS) - 1 else layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(p5)(x)
    if pitfalls.has(Pitfall.TF_POSTED_MODEL):
        # As posted: Flatten, Dense(10, relu), Dropout, then Dense(10, softmax) into categorical cross-entropy.
        x = layers.Flatten()(x)
        x = layers.Dropout(p5)(layers.ReLU()(_dense(cfg.num_classes, init)(x)))
        return keras.Model(inputs, layers.Softmax()(_dense(cfg.num_classes, init)(x)), name="simplecnn_posted")
    return keras.Model(inputs, _dense(cfg.num_classes, init)(x), name="simplecnn")


def _resnet_conv(c: resnet.Conv, init: Init) -> list[layers.Layer]:
    """torch's symmetric k // 2 padding: an explicit ZeroPadding2D, then a 'valid' convolution without bias
    (Keras's 'same' pads a strided convolution on the bottom and right only)."""
    conv = layers.Conv2D(c.cout, c.kernel, c.stride, padding="valid", use_bias=False,
                         kernel_initializer=_INITS[init.conv])
    return [layers.ZeroPadding2D(c.padding), conv] if c.padding else [conv]


class MaxPoolPadded(layers.MaxPooling2D):
    """torch's MaxPool2d(3, 2, padding=1): padded with -inf, so a padded cell never wins; its settings read as a
    max pool with that padding (reprokit/kits/tensorflow_kit/layer_settings.py)."""

    pad_each_side = 1

    def __init__(self, **kwargs) -> None:
        super().__init__(pool_size=3, strides=2, padding="valid", **kwargs)

    def call(self, x):
        p = self.pad_each_side
        return super().call(tf.pad(x, [[0, 0], [p, p], [p, p], [0, 0]], constant_values=float("-inf")))


class Bottleneck(keras.Model):
    """The PyTorch kit's Bottleneck (torchvision's): its layers created, and called, in the same order (the
    certificate numbers layers that way), the residual added after the projection."""

    def __init__(self, block: resnet.Block, init: Init, bn, **kwargs) -> None:
        super().__init__(**kwargs)

        def norm() -> layers.BatchNormalization:
            return layers.BatchNormalization(momentum=bn.momentum_keep, epsilon=bn.epsilon)

        c1, c2, c3 = block.convs
        self.branch = [*_resnet_conv(c1, init), norm(), layers.ReLU(), *_resnet_conv(c2, init), norm(),
                       layers.ReLU(), *_resnet_conv(c3, init), norm()]
        self.projection = [*_resnet_conv(block.downsample, init), norm()] if block.downsample else []
        self.relu = layers.ReLU()

    def call(self, x):
        out = x
        for layer in self.branch:
            out = layer(out)
        shortcut = x
        for layer in self.projection:
            shortcut = layer(shortcut)
        return self.relu(out + shortcut)


def resnet50(cfg: Model, input_size: int) -> keras.Model:
    init, bn = cfg.init, cfg.batchnorm
    lay = resnet.layout(cfg.width_multiplier, *resnet.options(cfg.options))
    x = inputs = keras.Input((input_size, input_size, 3))
    for layer in _resnet_conv(lay.stem, init):
        x = layer(x)
    x = layers.ReLU()(layers.BatchNormalization(momentum=bn.momentum_keep, epsilon=bn.epsilon)(x))
    x = MaxPoolPadded()(x)
    for stage in lay.stages:
        for block in stage:
            x = Bottleneck(block, init, bn)(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, _dense(cfg.num_classes, init)(x), name="resnet50")


def keras_applications_resnet50(cfg: Model, input_size: int) -> keras.Model:
    """``keras.applications.ResNet50(weights=None, classes=...)`` as people call it: at full width with ResNet-50's
    blocks that very call, else the same structure (layers, names, strides, biases, BatchNorm settings, Keras's
    default initializers), layer by layer, at the profile's width (keras_applications_resnet_structure)."""
    if cfg.width_multiplier == 1.0 and resnet.options(cfg.options)[0] == resnet.BLOCKS:
        return keras.applications.ResNet50(weights=None, input_shape=(input_size, input_size, 3),
                                           classes=cfg.num_classes)
    return keras_applications_resnet_structure(cfg, input_size)


def keras_applications_resnet_structure(cfg: Model, input_size: int) -> keras.Model:
    """keras.applications' ResNet50 (v1: a stage strides in its first 1x1 convolution; biases; BatchNorm epsilon
    1.001e-5 at Keras's momentum 0.99; the projection before the branch; a softmax head) at any width."""
    lay = resnet.layout(cfg.width_multiplier, resnet.options(cfg.options)[0], stride_at="1x1")

    def norm(name: str) -> layers.BatchNormalization:
        return layers.BatchNormalization(axis=3, epsilon=1.001e-5, name=name)

    x = inputs = keras.Input((input_size, input_size, 3))
    x = layers.ZeroPadding2D(((3, 3), (3, 3)), name="conv1_pad")(x)
    x = layers.Conv2D(lay.stem.cout, 7, strides=2, use_bias=True, name="conv1_conv")(x)
    x = layers.Activation("relu", name="conv1_relu")(norm("conv1_bn")(x))
    x = layers.ZeroPadding2D(((1, 1), (1, 1)), name="pool1_pad")(x)
    x = layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)
    for s, stage in enumerate(lay.stages, 2):
        for b, block in enumerate(stage, 1):
            name = f"conv{s}_block{b}"
            c1, c2, c3 = block.convs
            shortcut = x
            if block.downsample:
                shortcut = layers.Conv2D(block.downsample.cout, 1, strides=block.downsample.stride,
                                         name=f"{name}_0_conv")(x)
                shortcut = norm(f"{name}_0_bn")(shortcut)
            x = layers.Conv2D(c1.cout, 1, strides=c1.stride, name=f"{name}_1_conv")(x)
            x = layers.Activation("relu", name=f"{name}_1_relu")(norm(f"{name}_1_bn")(x))
            x = layers.Conv2D(c2.cout, 3, padding="SAME", name=f"{name}_2_conv")(x)
            x = layers.Activation("relu", name=f"{name}_2_relu")(norm(f"{name}_2_bn")(x))
            x = norm(f"{name}_3_bn")(layers.Conv2D(c3.cout, 1, name=f"{name}_3_conv")(x))
            x = layers.Activation("relu", name=f"{name}_out")(layers.Add(name=f"{name}_add")([shortcut, x]))
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    return keras.Model(inputs, layers.Dense(cfg.num_classes, activation="softmax", name="predictions")(x),
                       name="resnet50")


def build(cfg: Model, input_size: int, pitfalls: Pitfalls = Pitfalls()) -> keras.Model:
    if cfg.name == "custom":
        # The user's builder owns its layers and initialisation.
        return custom.build(cfg.builder("tensorflow"), cfg.options, input_size, cfg.num_classes, keras.Model,
                            "keras.Model", "TensorFlow")
    if cfg.name == "vgg16":
        return posted_vgg16(cfg, input_size) if pitfalls.has(Pitfall.TF_POSTED_VGG16) else vgg16(cfg, input_size)
    if cfg.name == "resnet50":
        stock = pitfalls.has(Pitfall.TF_KERAS_APPLICATIONS_RESNET50)
        return keras_applications_resnet50(cfg, input_size) if stock else resnet50(cfg, input_size)
    return simplecnn(cfg, input_size, pitfalls)


def parameter_counts(model: keras.Model) -> dict:
    """Keras counts BatchNorm's moving statistics in the total, as the PyTorch kit does too."""
    trainable = sum(int(w.numpy().size) for w in model.trainable_weights)
    return {"total": int(model.count_params()), "trainable": trainable}

"""A user's own model builders for the certificate's control pairs (tests/test_certificate_controls.py).

One tiny CNN, 32x32 inputs: conv 3x3 (16) - relu - pool - conv 3x3 (8) - relu - pool - flatten -
dense 16 - relu - dense (classes), written in each framework in several ways; ``residual`` puts a
residual block (conv 3x3 (16) with an identity skip, added before or after its relu) after the first pool. Each pair in the
test names one builder per framework; ``opts`` pick the variant. Import each framework inside its
builder: each environment has only its own framework.
"""


def torch_net(options, input_size, num_classes, **opts):
    import torch.nn.functional as F
    from torch import nn

    act = {"relu": nn.ReLU, "elu": nn.ELU}[opts.get("act", "relu")]
    pool = {"max": nn.MaxPool2d, "avg": nn.AvgPool2d}[opts.get("pool", "max")]
    size = opts.get("pool_size", 2)
    drop = opts.get("dropout", {})          # place -> (rate, kind)

    def dropout(place):
        rate, kind = drop.get(place, (0.0, "element"))
        return [(nn.Dropout2d if kind == "channel" else nn.Dropout)(rate)] if rate else []

    first = ([nn.ZeroPad2d(1), nn.Conv2d(3, 16, 3)] if opts.get("explicit_pad") else
             [nn.Conv2d(3, 16, 3, stride=opts.get("stride", 1), padding=1)])
    layers = [*first, act(), *([_Offset(opts["offset"])] if "offset" in opts else []), *dropout("conv1"), pool(2)]
    if opts.get("batchnorm"):
        layers.append(nn.BatchNorm2d(16))
    if "residual" in opts:
        layers.append(_Residual(opts["residual"], act))
    layers += [nn.Conv2d(16, 8, 3, padding=1), act(), *dropout("conv2"), pool(size)]
    spatial = input_size // (2 * opts.get("stride", 1)) // size
    if opts.get("global_pool"):
        head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 16)]
    else:
        head = [nn.Flatten(), nn.Linear(8 * spatial * spatial, 16, bias=not opts.get("bias_outside"))]
        if opts.get("bias_outside"):
            head.append(_Bias(16))
    layers += [*head, act(), *dropout("dense1"), nn.Linear(16, opts.get("classes", num_classes))]
    if opts.get("softmax"):
        layers.append(nn.Softmax(dim=1))
    if opts.get("functional"):
        return _Functional(layers, F)
    if opts.get("flatten") == "hwc":
        return _FlattenHWC(layers)
    return nn.Sequential(*layers)


def _Bias(n):
    """A bias added by a module of its own, after a bias-free dense layer."""
    import torch
    from torch import nn

    class Bias(nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = nn.Parameter(torch.zeros(n))

        def forward(self, x):
            return x + self.bias
    return Bias()


def _Residual(place, act):
    """conv 3x3 (16, 16) with an identity skip: relu(conv(x) + x) ("before" the relu), relu(conv(x)) + x
    ("after"), or no skip at all ("none")."""
    from torch import nn

    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.act = nn.Conv2d(16, 16, 3, padding=1), act()

        def forward(self, x):
            y = self.conv(x)
            if place == "before":
                return self.act(y + x)
            return self.act(y) + x if place == "after" else self.act(y)
    return Residual()


def _Offset(value):
    """A layer of the user's own that adds a constant it does not keep as a setting (nothing to read back)."""
    from torch import nn

    class Offset(nn.Module):
        def forward(self, x):
            return x + value
    return Offset()


def _KerasOffset(value):
    """The Keras twin of _Offset."""
    import keras

    class Offset(keras.layers.Layer):
        def call(self, x):
            return x + value
    return Offset()


def _Functional(layers, F):
    """The same network with the activations and pooling as function calls in forward()."""
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList([m for m in layers if isinstance(m, nn.Conv2d)])
            self.denses = nn.ModuleList([m for m in layers if isinstance(m, nn.Linear)])

        def forward(self, x):
            for conv in self.convs:
                x = F.max_pool2d(F.relu(conv(x)), 2)
            x = F.relu(self.denses[0](x.flatten(1)))
            return self.denses[1](x)
    return Net()


def _FlattenHWC(layers):
    """Flattens the feature map in (h, w, c) order, as Keras does, instead of PyTorch's (c, h, w)."""
    from torch import nn
    cut = next(i for i, m in enumerate(layers) if isinstance(m, nn.Flatten))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(*layers[:cut])
            self.head = nn.Sequential(*layers[cut + 1:])

        def forward(self, x):
            return self.head(self.features(x).permute(0, 2, 3, 1).flatten(1))
    return Net()


def keras_net(options, input_size, num_classes, **opts):
    import keras
    from keras import layers

    act = opts.get("act", "relu")
    pool = {"max": layers.MaxPooling2D, "avg": layers.AveragePooling2D}[opts.get("pool", "max")]
    size = opts.get("pool_size", 2)
    drop = opts.get("dropout", {})

    def activate(x):
        return layers.ReLU()(x) if act == "relu" else layers.Activation(act)(x)

    def dropout(x, place):
        rate, kind = drop.get(place, (0.0, "element"))
        if not rate:
            return x
        return (layers.SpatialDropout2D if kind == "channel" else layers.Dropout)(rate)(x)

    x = inputs = keras.Input((input_size, input_size, 3))
    if opts.get("explicit_pad"):
        x = layers.Conv2D(16, 3, padding="valid")(layers.ZeroPadding2D(1)(x))
    else:
        x = layers.Conv2D(16, 3, strides=opts.get("stride", 1), padding="same")(x)
    x = activate(x)
    if "offset" in opts:
        x = _KerasOffset(opts["offset"])(x)
    x = pool(2)(dropout(x, "conv1"))
    if opts.get("batchnorm"):
        # PyTorch's defaults, which Keras's are not (epsilon 1e-3, momentum 0.99)
        x = layers.BatchNormalization(axis=opts.get("bn_axis", -1), epsilon=opts.get("bn_epsilon", 1e-5),
                                      momentum=opts.get("bn_momentum", 0.9))(x)
    if "residual" in opts:          # as _Residual, the skip through a layers.Add
        y = layers.Conv2D(16, 3, padding="same")(x)
        place = opts["residual"]
        x = (activate(layers.Add()([y, x])) if place == "before" else
             layers.Add()([activate(y), x]) if place == "after" else activate(y))
    if opts.get("explicit_pad"):
        x = layers.Conv2D(8, 3, activation=act if opts.get("fused_activation") else None)(layers.ZeroPadding2D(1)(x))
    else:
        x = layers.Conv2D(8, 3, padding="same", activation=act if opts.get("fused_activation") else None)(x)
    if not opts.get("fused_activation"):
        x = activate(x)
    x = pool(size)(dropout(x, "conv2"))
    if opts.get("global_pool"):
        x = layers.GlobalAveragePooling2D()(x)
    else:
        if opts.get("flatten") == "chw":
            x = layers.Permute((3, 1, 2))(x)
        x = layers.Flatten()(x)
    x = dropout(activate(layers.Dense(opts.get("dense_width", 16))(x)), "dense1")
    return keras.Model(inputs, layers.Dense(opts.get("classes", num_classes))(x))


# -- the builders the pairs name ----------------------------------------------------------------

def _variant(builder, **opts):
    def build(options, input_size, num_classes):
        return builder(options, input_size, num_classes, **opts)
    return build


torch_base = _variant(torch_net)
keras_base = _variant(keras_net)
torch_explicit_pad_first = _variant(torch_net, explicit_pad=True)
keras_explicit_pad = _variant(keras_net, explicit_pad=True)
torch_functional = _variant(torch_net, functional=True)
keras_fused_activation = _variant(keras_net, fused_activation=True)
torch_bias_outside = _variant(torch_net, bias_outside=True)
torch_flatten_hwc = _variant(torch_net, flatten="hwc")
keras_flatten_chw = _variant(keras_net, flatten="chw")
torch_dropout = _variant(torch_net, dropout={"dense1": (0.3, "element")})
keras_dropout = _variant(keras_net, dropout={"dense1": (0.3, "element")})
keras_dropout_rate = _variant(keras_net, dropout={"dense1": (0.5, "element")})
torch_dropout_conv2 = _variant(torch_net, dropout={"conv2": (0.3, "element")})
torch_channel_dropout = _variant(torch_net, dropout={"conv1": (0.3, "channel")})
keras_channel_dropout = _variant(keras_net, dropout={"conv1": (0.3, "channel")})
keras_element_dropout_conv1 = _variant(keras_net, dropout={"conv1": (0.3, "element")})
keras_avg_pool = _variant(keras_net, pool="avg")
torch_global = _variant(torch_net, global_pool=True)
keras_global = _variant(keras_net, global_pool=True)
keras_global_pool3 = _variant(keras_net, global_pool=True, pool_size=3)
keras_elu = _variant(keras_net, act="elu")
torch_stride2 = _variant(torch_net, stride=2)
keras_stride2 = _variant(keras_net, stride=2)
torch_batchnorm = _variant(torch_net, batchnorm=True)
keras_batchnorm = _variant(keras_net, batchnorm=True)
keras_batchnorm_axis1 = _variant(keras_net, batchnorm=True, bn_axis=1)
keras_batchnorm_epsilon = _variant(keras_net, batchnorm=True, bn_epsilon=1e-3)
keras_batchnorm_momentum = _variant(keras_net, batchnorm=True, bn_momentum=0.99)      # Keras's default
torch_offset = _variant(torch_net, offset=1e-3)
keras_offset = _variant(keras_net, offset=1e-3)
keras_no_offset = _variant(keras_net, offset=0.0)
torch_residual = _variant(torch_net, residual="before")
keras_residual = _variant(keras_net, residual="before")
keras_residual_after = _variant(keras_net, residual="after")
keras_no_skip = _variant(keras_net, residual="none")
torch_softmax = _variant(torch_net, softmax=True)
keras_five_classes = _variant(keras_net, classes=5)
keras_dense_12 = _variant(keras_net, dense_width=12)


def keras_raises(options, input_size, num_classes):
    raise ValueError(f"no model for width {options.get('width')}")

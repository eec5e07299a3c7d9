"""The control pairs' tiny CNN (tests/cert_controls.py) as a user writes it in Flax NNX, NHWC.

conv 3x3 (16) - relu - pool - conv 3x3 (8) - relu - pool - flatten - dense 16 - relu - dense (classes), an
nnx.Sequential of the user's own small modules (the certificate reads each layer's output from an
nnx.Sequential), Keras's conventions (SAME padding, (h, w, c) flatten). ``opts`` pick the variant, as the
PyTorch and Keras builders' do; tests/certified.py JAX_CONTROLS names one per pair.
"""


def jax_net(options, input_size, num_classes, **opts):
    import jax.numpy as jnp
    from flax import nnx

    class Activation(nnx.Module):
        def __init__(self, activation):
            self.activation = activation

        def __call__(self, x):
            return nnx.relu(x) if self.activation == "relu" else nnx.elu(x)

    class Pool(nnx.Module):
        def __init__(self, pool, size):
            self.pool, self.pool_size, self.strides, self.padding = pool, (size, size), (size, size), (0, 0, 0, 0)

        def __call__(self, x):
            fn = nnx.max_pool if self.pool == "max" else nnx.avg_pool
            return fn(x, window_shape=self.pool_size, strides=self.strides, padding="VALID")

    class GlobalAveragePool(nnx.Module):
        def __call__(self, x):
            return jnp.mean(x, axis=(1, 2))

    class ZeroPad(nnx.Module):
        def __init__(self, n):
            self.padding = (n, n, n, n)

        def __call__(self, x):
            n = self.padding[0]
            return jnp.pad(x, ((0, 0), (n, n), (n, n), (0, 0)))

    class Offset(nnx.Module):
        """Adds a constant it does not keep as a setting (a private attribute: nothing to read back)."""
        def __init__(self, value):
            self._value = value

        def __call__(self, x):
            return x + self._value

    class Residual(nnx.Module):
        """conv 3x3 (16, 16) with an identity skip, added before its relu (as tests/cert_controls.py's)."""
        def __init__(self, place):
            self.conv, self.place = nnx.Conv(16, 16, (3, 3), padding="SAME", rngs=rngs), place

        def __call__(self, x):
            y = self.conv(x)
            return nnx.relu(y + x) if self.place == "before" else nnx.relu(y) + x

    class Flatten(nnx.Module):
        def __init__(self, order):
            self.order = order

        def __call__(self, x):
            if self.order == "chw":
                x = jnp.transpose(x, (0, 3, 1, 2))
            return x.reshape(x.shape[0], -1)

    class Softmax(nnx.Module):
        def __call__(self, x):
            return nnx.softmax(x, axis=-1)

    rngs = nnx.Rngs(options.get("seed", 0))
    act = opts.get("act", "relu")
    size = opts.get("pool_size", 2)
    drop = opts.get("dropout", {})          # place -> (rate, kind)

    def dropout(place):
        rate, kind = drop.get(place, (0.0, "element"))
        return [nnx.Dropout(rate, broadcast_dims=(1, 2) if kind == "channel" else (), rngs=rngs)] if rate else []

    if opts.get("explicit_pad"):
        first = [ZeroPad(1), nnx.Conv(3, 16, (3, 3), padding="VALID", rngs=rngs)]
    else:
        stride = opts.get("stride", 1)
        first = [nnx.Conv(3, 16, (3, 3), strides=stride, padding="SAME", rngs=rngs)]
    layers = [*first, Activation(act), *([Offset(opts["offset"])] if "offset" in opts else []), *dropout("conv1"),
              Pool(opts.get("pool", "max"), 2)]
    if opts.get("batchnorm"):
        # PyTorch's defaults (Flax's momentum is the keep factor, as Keras's); the two-pass variance
        layers.append(nnx.BatchNorm(16, axis=opts.get("bn_axis", -1), epsilon=opts.get("bn_epsilon", 1e-5),
                                    momentum=0.9, use_fast_variance=False, rngs=rngs))
    if "residual" in opts:
        layers.append(Residual(opts["residual"]))
    layers += [nnx.Conv(16, 8, (3, 3), padding="SAME", rngs=rngs), Activation(act), *dropout("conv2"),
               Pool(opts.get("pool", "max"), size)]
    spatial = input_size // (2 * opts.get("stride", 1)) // size
    if opts.get("global_pool"):
        layers += [GlobalAveragePool(), nnx.Linear(8, 16, rngs=rngs)]
    else:
        layers += [Flatten(opts.get("flatten", "hwc")), nnx.Linear(8 * spatial * spatial, opts.get("dense_width", 16),
                                                                   rngs=rngs)]
    layers += [Activation(act), *dropout("dense1"),
               nnx.Linear(opts.get("dense_width", 16), opts.get("classes", num_classes), rngs=rngs)]
    if opts.get("softmax"):
        layers.append(Softmax())
    if opts.get("functional"):
        return _functional(layers, nnx)
    return nnx.Sequential(*layers)


def _functional(layers, nnx):
    """The same network with the activations and pooling as function calls in __call__ (not an nnx.Sequential)."""
    convs = [m for m in layers if isinstance(m, nnx.Conv)]
    denses = [m for m in layers if isinstance(m, nnx.Linear)]

    class Net(nnx.Module):
        def __init__(self):
            self.convs, self.denses = nnx.List(convs), nnx.List(denses)

        def __call__(self, x):
            for conv in self.convs:
                x = nnx.max_pool(nnx.relu(conv(x)), (2, 2), (2, 2))
            x = nnx.relu(self.denses[0](x.reshape(x.shape[0], -1)))
            return self.denses[1](x)
    return Net()


def _variant(**opts):
    def build(options, input_size, num_classes):
        return jax_net(options, input_size, num_classes, **opts)
    return build


jax_base = _variant()
jax_explicit_pad = _variant(explicit_pad=True)
jax_functional = _variant(functional=True)
jax_flatten_chw = _variant(flatten="chw")
jax_dropout = _variant(dropout={"dense1": (0.3, "element")})
jax_dropout_rate = _variant(dropout={"dense1": (0.5, "element")})
jax_channel_dropout = _variant(dropout={"conv1": (0.3, "channel")})
jax_element_dropout_conv1 = _variant(dropout={"conv1": (0.3, "element")})
jax_avg_pool = _variant(pool="avg")
jax_global = _variant(global_pool=True)
jax_global_pool3 = _variant(global_pool=True, pool_size=3)
jax_elu = _variant(act="elu")
jax_stride2 = _variant(stride=2)
jax_batchnorm = _variant(batchnorm=True)
jax_batchnorm_axis1 = _variant(batchnorm=True, bn_axis=1)
jax_batchnorm_epsilon = _variant(batchnorm=True, bn_epsilon=1e-3)
jax_residual = _variant(residual="before")
jax_residual_after = _variant(residual="after")
jax_offset = _variant(offset=1e-3)
jax_no_offset = _variant(offset=0.0)
jax_five_classes = _variant(classes=5)
jax_dense_12 = _variant(dense_width=12)


def jax_raises(options, input_size, num_classes):
    raise ValueError(f"no model for width {options.get('width')}")

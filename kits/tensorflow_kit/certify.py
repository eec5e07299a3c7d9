"""The TensorFlow half of the equivalence certificate: the kit's own model and step, in canonical form.

The model, optimizer, loss and input preprocessing are the Backend's, built from
the spec exactly as a training run builds them; only every Dropout rate is set
to 0 (before anything is traced) so that two frameworks' random masks cannot differ.
Keras's layout is the canonical one, so weights pass through unchanged.

FLOPs: TensorFlow 2.21 still ships the TF1 profiler (``tf.compat.v1.profiler``), which
counts the float operations of every op with a registered ``flops`` statistic in a
``tf.Graph`` from its static shapes. The kit traces forward, loss and gradient of one
fixed-shape batch into a concrete function and profiles that function's graph. The
traced graph still holds ops whose results nothing uses (the gradient with respect to
the input image, which TensorFlow's runtime prunes before running); only ops that the
function's outputs depend on are summed, and the pruned count is reported beside it.
"""
from __future__ import annotations

import os
import platform

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kits.common import certificate as cert  # noqa: E402
from kits.common.data import Arrays  # noqa: E402
from kits.tensorflow_kit.backend import Backend  # noqa: E402

COUNTER = "tf.compat.v1.profiler (float_operation) on the traced training-step graph"
CONVENTIONS = ("counts every op with a registered flops statistic, 2 FLOPs per multiply-accumulate for Conv2D, "
               "Conv2DBackpropInput/Filter and MatMul, plus elementwise ops (bias adds, BatchNorm arithmetic, "
               "pooling and its gradient, the loss), from static shapes; ops whose outputs the step does not use are "
               "left out; compared on its convolution and matrix-product ops")
MATMUL_CONV = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MatMul", "BatchMatMul", "BatchMatMulV2",
               "BatchMatMulV3", "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
               "DepthwiseConv2dNativeBackpropFilter"}


def _layers(model: keras.Model):
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from _layers(layer)
        else:
            yield layer


class Certifier:
    framework = "tensorflow"

    def __init__(self, spec: dict, arrays: Arrays) -> None:
        self.spec = spec
        self.arrays = arrays
        self.backend = Backend(spec)
        self._build()

    def _build(self) -> None:
        self.backend.build(self.arrays)
        self.model = self.backend.model
        self.dtype = tf.as_dtype(self.model.trainable_variables[0].dtype)
        for layer in _layers(self.model):
            if isinstance(layer, keras.layers.Dropout):     # SpatialDropout2D is one too
                layer.rate = 0.0
        self.params = self._map()
        model, loss_fn, optimizer = self.model, self.backend.loss_fn, self.backend.optimizer

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        self._step = tf.function(step)

    def use_float64(self) -> None:
        """Build the same model and optimizer again, from the same builder, in float64."""
        # Layers take their dtype from the global dtype policy (cached once a layer exists), inputs
        # and losses from floatx: set both.
        floatx, policy = keras.config.floatx(), keras.config.dtype_policy()
        keras.config.set_floatx("float64")
        keras.config.set_dtype_policy("float64")
        try:
            self._build()
        finally:
            keras.config.set_floatx(floatx)
            keras.config.set_dtype_policy(policy)
        if self.dtype != tf.float64:
            raise RuntimeError(f"the float64 rebuild of the Keras model has {self.dtype.name} weights")

    def _map(self) -> list[tuple[dict, keras.Variable]]:
        params = []
        counters: dict[str, int] = {}
        for layer in _layers(self.model):
            if not layer.weights:
                continue
            if isinstance(layer, keras.layers.Conv2D) and type(layer).__name__ == "Conv2D":
                if layer.groups != 1:
                    raise cert.UnmappableModel(f"TensorFlow layer {layer.name} is a grouped convolution "
                                               f"(groups={layer.groups}), which has no canonical form here")
                kind, roles = "conv", [("kernel", layer.kernel), ("bias", layer.bias)]
            elif isinstance(layer, keras.layers.Dense):
                kind, roles = "dense", [("kernel", layer.kernel), ("bias", layer.bias)]
            elif isinstance(layer, keras.layers.BatchNormalization):
                kind, roles = "batchnorm", [("gamma", layer.gamma), ("beta", layer.beta),
                                            ("moving_mean", layer.moving_mean),
                                            ("moving_variance", layer.moving_variance)]
            else:
                raise cert.UnmappableModel(f"TensorFlow layer {layer.name} ({type(layer).__name__}) has weights but "
                                           f"no canonical form (known: Conv2D, Dense, BatchNormalization)")
            roles = [(r, v) for r, v in roles if v is not None]
            if len(roles) != len(layer.weights):
                raise cert.UnmappableModel(f"TensorFlow layer {layer.name} has {len(layer.weights)} weights, of which "
                                           f"the certificate maps {len(roles)}")
            counters[kind] = counters.get(kind, 0) + 1
            for role, var in roles:
                params.append((cert.record(kind, counters[kind], role, var.shape, var.path, var.shape), var))
        return params

    def records(self) -> list[dict]:
        return [rec for rec, _ in self.params]

    def export(self) -> dict[str, np.ndarray]:
        return {rec["name"]: np.array(var.numpy()) for rec, var in self.params}

    def load(self, weights: dict[str, np.ndarray]) -> None:
        for rec, var in self.params:
            var.assign(weights[rec["name"]].astype(var.dtype))

    def environment(self) -> dict:
        return {"framework": "tensorflow", "framework_version": tf.__version__, "keras_version": keras.__version__,
                "python": platform.python_version(), "numpy": np.__version__, "device": "cpu" if not self.backend.gpus
                else "gpu", "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on for x86 CPU builds)"),
                "cpu_threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                                "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}}

    def _batch(self, x: np.ndarray, y: np.ndarray):
        return self.backend._to_device(x, y)

    def _inputs(self, x: np.ndarray) -> tf.Tensor:
        """fp32: the kit's own preprocessing (scale, resize on the device); fp64: the same scale and
        resize computed in float64 (kits.common.certificate.preprocess64; tf.image.resize returns float32)."""
        if self.dtype == tf.float64:
            return tf.convert_to_tensor(cert.preprocess64(x, self.backend.scale, self.backend.resize))
        xb, _ = self._batch(x, np.zeros(len(x), np.int64))
        return self.backend._inputs(xb)

    def logits(self, x: np.ndarray, training: bool) -> list[list[float]]:
        out = self.model(self._inputs(x), training=training)
        return np.asarray(out, np.float64).tolist()

    def kit_train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]]) -> list[float]:
        """The kit's own train_step (fp32) on each batch; the loss is the one it adds to its sums."""
        return cert.kit_train_losses(self.backend, [(self._batch(x, y), len(y)) for x, y in batches])

    def neutralisable(self) -> list[dict]:
        """Declared differences are removed on the PyTorch side; Keras runs as the kit trains."""
        return []

    def train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]], neutralise: bool = False) -> list[float]:
        """The kit's step, in the model's dtype: the kit's loss, gradient tape, the kit's optimizer."""
        losses = []
        for x, y in batches:
            _, yb = self._batch(x, y)
            losses.append(float(self._step(self._inputs(x), yb)))
        return losses

    def training_loss(self, x: np.ndarray, y: np.ndarray) -> float:
        _, yb = self._batch(x, y)
        return float(self.backend.loss_fn(yb, self.model(self._inputs(x), training=True)))

    def flops(self, x: np.ndarray, y: np.ndarray) -> dict:
        n = min(cert.FLOPS_BATCH, len(x))
        _, yb = self._batch(x[:n], y[:n])
        inputs = self._inputs(x[:n])
        model, loss_fn = self.model, self.backend.loss_fn

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            return loss, tape.gradient(loss, model.trainable_variables)

        fn = tf.function(step).get_concrete_function(tf.TensorSpec(inputs.shape, inputs.dtype),
                                                     tf.TensorSpec(yb.shape, yb.dtype))
        graph = fn.graph
        options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
        options["output"] = "none"
        profile = tf.compat.v1.profiler.profile(graph=graph, cmd="scope", options=options)
        per_node: dict[str, int] = {}
        stack = list(profile.children)
        while stack:
            node = stack.pop()
            if node.float_ops:
                per_node[node.name] = int(node.float_ops)
            stack.extend(node.children)
        live = _live_ops(graph)
        total = matmul_conv = dead = 0
        by_op: dict[str, int] = {}
        for name, count in per_node.items():
            if name not in live:
                dead += count
                continue
            kind = graph.get_operation_by_name(name).type
            by_op[kind] = by_op.get(kind, 0) + count
            total += count
            matmul_conv += count if kind in MATMUL_CONV else 0
        return {"counter": COUNTER, "conventions": CONVENTIONS, "batch": n,
                "per_sample": {"matmul_conv": matmul_conv / n, "total": total / n},
                "unused_ops_per_sample": dead / n, "profiler_total_per_sample": int(profile.total_float_ops) / n,
                "by_op_per_sample": {k: v / n for k, v in sorted(by_op.items())}}


def _live_ops(graph: tf.Graph) -> set[str]:
    """Names of the ops the graph's outputs depend on."""
    live: set[str] = set()
    stack = [t.op for t in graph.outputs if t is not None]
    while stack:
        op = stack.pop()
        if op.name in live:
            continue
        live.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return live

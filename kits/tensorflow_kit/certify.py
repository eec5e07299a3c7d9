"""The TensorFlow half of the equivalence certificate: the kit's own model and step, in canonical form.

The model, optimizer, loss and input preprocessing are the Backend's, built from the spec exactly
as a training run builds them. The trace and the dropout passes see the model as it trains; before
anything else is traced every Dropout rate is set to 0, so that two frameworks' random masks
cannot differ. Keras's layout is the canonical one: weights pass through unchanged, except the rows
of a dense layer fed by a transposed feature map.
"""
from __future__ import annotations

import os
import platform

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kits.common import (
    arithmetic,  # noqa: E402
    custom,  # noqa: E402
)
from kits.common import certificate as cert  # noqa: E402
from kits.tensorflow_kit import trace  # noqa: E402
from kits.tensorflow_kit.backend import Backend  # noqa: E402


def _layers(model: keras.Model):
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from _layers(layer)
        else:
            yield layer


def read_optimizer(opt) -> dict:
    """An optimizer read back from the object itself: its class and settings."""
    out = {"class": f"keras.optimizers.{type(opt).__name__}", "name": type(opt).__name__.lower(),
           "lr": float(np.asarray(opt.learning_rate)), "weight_decay": opt.weight_decay}
    if isinstance(opt, keras.optimizers.Adam):
        out.update(beta1=float(opt.beta_1), beta2=float(opt.beta_2), epsilon=float(opt.epsilon),
                   amsgrad=bool(opt.amsgrad))
    elif isinstance(opt, keras.optimizers.SGD):
        out.update(momentum=float(opt.momentum), nesterov=bool(opt.nesterov))
    return out


class Certifier(cert.Side):
    framework = "tensorflow"
    backend_class = Backend
    trained_with = True                    # the training argument of the model's passes in training mode

    def _build(self) -> None:
        """Build the kit's model and optimizer (again); the first build is traced, later ones (the same
        builder, freshly initialised) reuse what the trace found, by layer number."""
        self.backend.build(self.arrays)
        self.model = self.backend.model
        self._canonical()
        self._step = self._kit_step(self.backend.loss_fn, self.backend.optimizer)
        self._passes = self._training_passes()

    def _canonical(self) -> None:
        """The model in canonical form: traced once, then mapped (again after each rebuild)."""
        self.dtype = tf.as_dtype(self.model.trainable_variables[0].dtype)
        if self.trace is None:
            x = self._inputs(self.x_trace)
            try:
                self.trace = trace.trace(self.model, tuple(x.shape), x.dtype, training=self.trained_with)
            except Exception as exc:
                if custom.from_the_kit(exc):
                    raise
                raise custom.BadModel(f"the model from {self.who} fails on a batch of shape {tuple(x.shape)}: "
                                      f"{custom.one_line(exc)}{custom.where(exc)}") from None
            self.dense_rows: dict[int, list[int] | None] = {}
        self.params = self._map()

    def _kit_step(self, loss_fn, optimizer):
        model = self.model

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return tf.function(step)

    def _training_passes(self):
        model, training = self.model, self.trained_with

        def passes(x, n):
            out = tf.TensorArray(tf.float32, size=n)
            for i in tf.range(n):          # one graph loop: fresh dropout masks on every pass
                out = out.write(i, tf.cast(model(x, training=training), tf.float32))
            return out.stack()
        return tf.function(passes)

    def dropout_off(self) -> None:
        """Every Dropout rate to 0 (SpatialDropout2D is a Dropout too); before any step is traced."""
        for layer in _layers(self.model):
            if isinstance(layer, keras.layers.Dropout):
                layer.rate = 0.0

    def use_float64(self) -> None:
        """Build the same model and optimizer again, from the same builder, in float64, dropout off."""
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
        self.dropout_off()
        if self.dtype != tf.float64:
            raise RuntimeError(f"the float64 rebuild of the Keras model has {self.dtype.name} weights")

    def _read_optimizer(self) -> dict:
        return read_optimizer(self.backend.optimizer)

    def _map(self) -> list[tuple[dict, keras.Variable, list[int] | None]]:
        params = []
        counters: dict[str, int] = {}
        for layer in _layers(self.model):
            if not layer.weights:
                continue
            if isinstance(layer, keras.layers.Conv2D) and type(layer).__name__ == "Conv2D":
                if layer.groups != 1:
                    raise cert.UnmappableModel(f"TensorFlow layer {layer.name} of {self.who} is a grouped convolution "
                                               f"(groups={layer.groups}), which has no canonical form here")
                kind, roles = "conv", [("kernel", layer.kernel), ("bias", layer.bias)]
            elif isinstance(layer, keras.layers.Dense):
                kind, roles = "dense", [("kernel", layer.kernel), ("bias", layer.bias)]
            elif isinstance(layer, keras.layers.BatchNormalization):
                kind, roles = "batchnorm", [("gamma", layer.gamma), ("beta", layer.beta),
                                            ("moving_mean", layer.moving_mean),
                                            ("moving_variance", layer.moving_variance)]
            else:
                raise cert.UnmappableModel(f"TensorFlow layer {layer.name} ({type(layer).__name__}) of {self.who} has "
                                           f"weights but no canonical form (known: Conv2D, Dense, BatchNormalization)")
            roles = [(r, v) for r, v in roles if v is not None]
            if len(roles) != len(layer.weights):
                raise cert.UnmappableModel(f"TensorFlow layer {layer.name} of {self.who} has {len(layer.weights)} "
                                           f"weights, of which the certificate maps {len(roles)}")
            counters[kind] = counters.get(kind, 0) + 1
            for role, var in roles:
                rows = (self.dense_rows.setdefault(counters[kind], self.trace.rows.get(id(var)))
                        if role == "kernel" and kind == "dense" else None)
                params.append((cert.record(kind, counters[kind], role, var.shape, var.path, var.shape), var, rows))
        return params

    def records(self) -> list[dict]:
        return [rec for rec, _, _ in self.params]

    def last_layer(self) -> str:
        layer = self.model.layers[-1]
        act = getattr(layer, "activation", None)
        name = getattr(act, "__name__", None)
        return f"{layer.name} ({type(layer).__name__}" + (f", activation {name})" if name and name != "linear" else ")")

    def export(self) -> dict[str, np.ndarray]:
        return {rec["name"]: arithmetic.rows_to_canonical(np.array(var.numpy()), rows) for rec, var, rows in self.params}

    def load(self, weights: dict[str, np.ndarray]) -> None:
        for rec, var, rows in self.params:
            var.assign(arithmetic.rows_from_canonical(weights[rec["name"]], rows).astype(var.dtype))

    def environment(self) -> dict:
        return {"framework": "tensorflow", "framework_version": tf.__version__, "keras_version": keras.__version__,
                "python": platform.python_version(), "numpy": np.__version__, "device": "cpu" if not self.backend.gpus
                else "gpu", "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on for x86 CPU builds)"),
                "cpu_threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                                "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}}

    def expects_logits(self) -> bool:
        return bool(self.backend.loss_fn.from_logits)

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
        out = self.model(self._inputs(x), training=self.trained_with if training else False)
        return np.asarray(out, np.float64).tolist()

    def train_outputs(self, x: np.ndarray, passes: int) -> list[list[list[float]]]:
        """The outputs of ``passes`` forward passes in training mode, dropout as the kit trains (fp32)."""
        return np.asarray(self._passes(self._inputs(x), tf.constant(passes)), np.float64).tolist()

    def kit_train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]], perturb: bool = False) -> list[float]:
        """The kit's own train_step (fp32) on each batch; with ``perturb``, the kit's preprocessed inputs
        moved one float32 ulp up."""
        device = []
        for x, y in batches:
            xb, yb = self._batch(x, y)
            if perturb:
                xf = np.asarray(self.backend._inputs(xb))
                xb = tf.convert_to_tensor(np.nextafter(xf, np.float32(np.inf)))
            device.append((xb, yb))
        return cert.kit_train_losses(self.backend, [(b, len(y)) for b, (_, y) in zip(device, batches)])

    def neutralisable(self) -> list[dict]:
        """Declared differences are removed on the PyTorch side; Keras runs as the kit trains."""
        return []

    def train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]]) -> list[float]:
        """The kit's step, in the model's dtype: the kit's loss, gradient tape, the kit's optimizer."""
        losses = []
        for x, y in batches:
            _, yb = self._batch(x, y)
            losses.append(float(self._step(self._inputs(x), yb)))
        return losses

    def training_loss(self, x: np.ndarray, y: np.ndarray) -> float:
        _, yb = self._batch(x, y)
        return float(self.backend.loss_fn(yb, self.model(self._inputs(x), training=True)))

    def reset(self) -> None:
        """Leave nothing behind for the next certificate in this process (one may certify several)."""
        keras.backend.clear_session()


class Captured(Certifier):
    """The model a user's script trains, as the probe captured it before its first optimizer step: the same
    canonical form as a kit model, read from the object itself, never rebuilt from code. Its passes in
    training mode take the training argument the script gave its model; the inputs are the PyTorch side's
    batch (``x``, NHWC, as the other script prepared it) or, where the model takes another shape, standard
    normal numbers of its own input shape (then its logits are not comparable)."""

    def __init__(self, model, optimizer, x: np.ndarray, trained_with: bool, expects_logits: bool | None,
                 who: str) -> None:
        self.model, self.who, self.backend, self.trace = model, who, None, None
        self.trained_with = bool(trained_with)
        self._expects_logits = expects_logits
        self.x_first = x
        self.x_trace = x[:cert.TRACE_BATCH]
        self._canonical()
        self._passes = self._training_passes()
        self.optimizer = read_optimizer(optimizer)

    def _inputs(self, x: np.ndarray) -> tf.Tensor:
        return tf.convert_to_tensor(x.astype(np.float32))

    def expects_logits(self) -> bool | None:
        return self._expects_logits

    def environment(self) -> dict:
        return {"framework": "tensorflow", "framework_version": tf.__version__, "keras_version": keras.__version__,
                "python": platform.python_version(), "numpy": np.__version__,
                "device": "gpu" if tf.config.list_physical_devices("GPU") else "cpu",
                "cpu_threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                                "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}}

    def shared(self) -> list[str]:
        """Layers with weights that the model's graph calls at more than one place (their inbound nodes: a
        functional or Sequential model's; a subclassed model's calls are not recorded there)."""
        return [f"{layer.name} ({type(layer).__name__}) at {len(layer._inbound_nodes)} places"
                for layer in _layers(self.model) if layer.weights and len(getattr(layer, "_inbound_nodes", ())) > 1]

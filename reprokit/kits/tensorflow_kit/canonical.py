"""A Keras model in the certificate's canonical form (reprokit/kits/framework_free/certificate.py), however it was
built.

``Canonical`` traces a built model once, maps its weights to canonical names and shapes (Keras's layout
is the canonical one: weights pass through unchanged, except the rows of a dense layer fed by a
transposed feature map), exports and loads them, and runs its passes. The kit's certificate side
(reprokit/kits/tensorflow_kit/certify.py) builds its model from the spec; ``Captured`` takes the model a user's
script trains, as the probe captured it. Nothing here knows the kit's Backend or its pitfalls.
"""
from __future__ import annotations

import os
import platform

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from reprokit.kits.framework_free import (
    arithmetic,
    custom,
    parting,  # noqa: E402
)
from reprokit.kits.framework_free import certificate as cert  # noqa: E402
from reprokit.kits.framework_free.model_call import ModelCall  # noqa: E402
from reprokit.kits.tensorflow_kit import layer_settings, trace  # noqa: E402
from reprokit.kits.tensorflow_kit.first_call import replay_calls  # noqa: E402


def _layers(model: keras.Model):
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from _layers(layer)
        else:
            yield layer


def _graph_nodes(model: keras.Model) -> set[int]:
    """The ids of the nodes in the graph of a functional or Sequential model and of the models in it."""
    graph = getattr(model, "_functional", None) or model
    nodes = {id(n) for ns in getattr(graph, "_nodes_by_depth", {}).values() for n in ns}
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            nodes |= _graph_nodes(layer)
    return nodes


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


class Canonical:
    """A built model's canonical form and passes; subclasses give ``model``, ``who`` and ``_inputs``."""
    framework = "tensorflow"
    trained_with = True                    # the training argument of the model's passes in training mode

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
            # The names the user's model has as built: a rebuild in the same process numbers them on.
            self.layer_names = [layer.name for layer in _layers(self.model)]
        self.params = self._map()

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
        return {rec["name"]: arithmetic.rows_to_canonical(np.array(var.numpy()), rows)
                for rec, var, rows in self.params}

    def load(self, weights: dict[str, np.ndarray]) -> None:
        for rec, var, rows in self.params:
            var.assign(arithmetic.rows_from_canonical(weights[rec["name"]], rows).astype(var.dtype))

    def logits(self, x: np.ndarray, training: bool) -> list[list[float]]:
        out = self.model(self._inputs(x), training=self.trained_with if training else False)
        return np.asarray(out, np.float64).tolist()

    def train_outputs(self, x: np.ndarray, passes: int) -> list[list[list[float]]]:
        """The outputs of ``passes`` forward passes in training mode, dropout as the kit trains (fp32)."""
        return np.asarray(self._passes(self._inputs(x), tf.constant(passes)), np.float64).tolist()

    def layer_outputs(self, x: np.ndarray, training: bool) -> list[tuple[dict, np.ndarray]]:
        """Every layer's output in call order, in evaluation or training mode (an eager pass; dropout off: its
        rate set to 0 before), with its settings (reprokit/kits/framework_free/parting.py). A fused activation is an
        entry of its own after its layer's product, as PyTorch's separate module is: the product is computed with the
        activation set to linear for the call."""
        out: list[tuple[dict, np.ndarray]] = []

        def wrap(layer, call):
            def recorded(*args, **kwargs):
                fused = layer_settings.fused_activation(layer)
                in_shape = [int(d) for d in args[0].shape] if args and hasattr(args[0], "shape") else []
                if fused is not None:               # the product alone, then the activation on it
                    object.__setattr__(layer, "activation", keras.activations.linear)
                    try:
                        y = call(*args, **kwargs)
                    finally:
                        object.__setattr__(layer, "activation", fused)
                else:
                    y = call(*args, **kwargs)
                if not hasattr(y, "shape"):         # a layer of several outputs: not one layer's output
                    return y
                family, settings = layer_settings.read(layer, in_shape)
                name = names.get(id(layer), layer.name)
                out.append((parting.entry(name, type(layer).__name__, family, settings, y.shape),
                            np.asarray(y, np.float64)))
                if fused is not None:
                    y = fused(y)
                    out.append((parting.entry(f"{name}.activation", layer_settings.activation_name(fused),
                                              "activation", layer_settings.activation_settings(fused), y.shape),
                                np.asarray(y, np.float64)))
                return y
            return recorded
        leaves = list(_layers(self.model))
        names = dict(zip(map(id, leaves), self.layer_names)) if len(leaves) == len(self.layer_names) else {}
        for layer in leaves:
            object.__setattr__(layer, "call", wrap(layer, layer.call))
        try:
            self.model(self._inputs(x), training=self.trained_with if training else False)
        finally:
            for layer in leaves:
                object.__delattr__(layer, "call")
        return out

    def canonical_gradients(self, grads) -> dict[str, np.ndarray]:
        """Gradients of the model's trainable variables (in their order), by canonical name."""
        by_var = {id(v): g for v, g in zip(self.model.trainable_variables, grads)}
        return {rec["name"]: arithmetic.rows_to_canonical(np.asarray(by_var[id(var)], np.float64), rows)
                for rec, var, rows in self.params if by_var.get(id(var)) is not None}



class Captured(Canonical):
    """The model a user's script trains, as the probe captured it before its first optimizer step: the same
    canonical form as a kit model, read from the object itself, never rebuilt from code. Its passes in
    training mode take the training argument the script gave its model; the inputs are the PyTorch side's
    batch (``x``, NHWC, as the other script prepared it) or, where the model takes another shape, standard
    normal numbers of its own input shape (then its logits are not comparable)."""

    def __init__(self, model, optimizer, x: np.ndarray, call: ModelCall, trained_with: bool,
                 expects_logits: bool | None, who: str) -> None:
        self.model, self.who, self.backend, self.trace, self.call = model, who, None, None, call
        replay_calls(model, call)
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

    def modes(self) -> dict:
        """Where the script called its model with training=False in its training steps: the trace of the model
        as built (training=True) beside it."""
        if self.trained_with:
            return {"in_eval": [], "ops_as_built": None}
        x = self._inputs(self.x_trace)
        return {"in_eval": [f"{self.model.name} (called with training=False)"],
                "ops_as_built": trace.trace(self.model, tuple(x.shape), x.dtype, training=True).ops}

    def shared(self) -> list[str]:
        """Layers with weights that the model's graph calls at more than one place. Only the nodes of the
        model's own graph count: Sequential.add rebuilds the graph at each layer, leaving every earlier
        layer with a stale inbound node per rebuild; a subclassed model's calls are not recorded at all."""
        nodes = _graph_nodes(self.model)
        places = {f"{layer.name} ({type(layer).__name__})": sum(id(n) in nodes for n in layer._inbound_nodes)
                  for layer in _layers(self.model) if layer.weights}
        return [f"{name} at {n} places" for name, n in places.items() if n > 1]

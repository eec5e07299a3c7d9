"""The TensorFlow half of the equivalence certificate: the kit's own model and step, in canonical form.

The model, optimizer, loss and input preprocessing are the Backend's, built from the spec exactly
as a training run builds them (reprokit/kits/tensorflow_kit/canonical.py holds the canonical form and the
passes). The trace and the dropout passes see the model as it trains; before anything else is traced
every Dropout rate is set to 0, so that two frameworks' random masks cannot differ.
"""
from __future__ import annotations

import os
import platform

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from reprokit.kits.framework_free import certificate as cert  # noqa: E402
from reprokit.kits.tensorflow_kit.backend import Backend  # noqa: E402
from reprokit.kits.tensorflow_kit.canonical import Canonical, read_optimizer  # noqa: E402


class Certifier(Canonical, cert.Side):
    framework = "tensorflow"
    backend_class = Backend

    def _build(self) -> None:
        """Build the kit's model and optimizer (again); the first build is traced, later ones (the same
        builder, freshly initialised) reuse what the trace found, by layer number."""
        self.backend.build(self.arrays)
        self.model = self.backend.model
        self._canonical()
        self._step = self._kit_step(self.backend.loss_fn, self.backend.optimizer)
        self._passes = self._training_passes()

    def _kit_step(self, loss_fn, optimizer):
        model = self.model

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
                scaled = optimizer.scale_loss(loss)       # as the kit's step: scaled under a LossScaleOptimizer
            grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss, grads
        return tf.function(step)

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
        resize computed in float64 (reprokit.kits.framework_free.certificate.preprocess64; tf.image.resize returns
        float32)."""
        if self.dtype == tf.float64:
            return tf.convert_to_tensor(cert.preprocess64(x, self.backend.scale, self.backend.resize))
        xb, _ = self._batch(x, np.zeros(len(x), np.int64))
        return self.backend._inputs(xb)

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

    def train_losses(self, batches: list[tuple[np.ndarray, np.ndarray]],
                     gradients: list[dict[str, np.ndarray]] | None = None) -> list[float]:
        """The kit's step, in the model's dtype: the kit's loss, gradient tape, the kit's optimizer; each
        step's canonical gradients appended to ``gradients`` where given."""
        losses = []
        for x, y in batches:
            _, yb = self._batch(x, y)
            loss, grads = self._step(self._inputs(x), yb)
            losses.append(float(loss))
            if gradients is not None:
                gradients.append(self.canonical_gradients(grads))
        return losses

    def training_loss(self, x: np.ndarray, y: np.ndarray) -> float:
        _, yb = self._batch(x, y)
        return float(self.backend.loss_fn(yb, self.model(self._inputs(x), training=True)))

    def reset(self) -> None:
        """Leave nothing behind for the next certificate in this process (one may certify several)."""
        keras.backend.clear_session()

"""The user's own input pipeline, evaluation step and metrics, as a user would write them.

Each takes the options of the experiment's [model] first. options["plant"] lists the pitfalls to plant
(planted_models.py plants those of the models):

- "short-batches": every second training batch holds a quarter of the batch size;
- "short-last-batch": each epoch ends on a batch of half the batch size (a remainder not dropped), a
  shape the warmup's steps never see;
- "slow-input": every training batch arrives 50 ms late (a slow disk or decoder);
- "eval-with-grad": the evaluation step runs without torch.no_grad();
- "per-batch-metrics": loss and accuracy divided by the number of batches, not of samples;
- "batch-of-one": the tf.data pipeline maps each example to a batch of one and never batches.
"""
import time


def _batches(options, split, n, batch_size, epoch):
    import numpy as np
    order = np.random.default_rng(epoch).permutation(n) if split == "train" else np.arange(n)
    start, step = 0, 0
    while start < n:
        size = batch_size // 4 if split == "train" and "short-batches" in options["plant"] and step % 2 else batch_size
        if split == "train" and "short-last-batch" in options["plant"] and start + 2 * size > n:
            size //= 2
        if split == "train" and start + size > n:
            return
        yield order[start:start + size]
        start, step = start + size, step + 1


def torch_input(options, split, x, y, batch_size, epoch):
    import torch
    for idx in _batches(options, split, len(x), batch_size, epoch):
        if split == "train" and "slow-input" in options["plant"]:
            time.sleep(0.05)
        yield torch.from_numpy(x[idx]), torch.from_numpy(y[idx])


def torch_evaluate(options, model, x):
    import torch
    if "eval-with-grad" in options["plant"]:
        return model(x)
    with torch.no_grad():
        return model(x)


class _TorchMetrics:
    def __init__(self, plant):
        self.plant, self.loss, self.correct, self.samples, self.batches = plant, 0.0, 0, 0, 0

    def update(self, outputs, labels, loss):
        n = len(labels)
        self.loss += loss.item() * n
        self.correct += int((outputs.argmax(1) == labels).sum())
        self.samples, self.batches = self.samples + n, self.batches + 1

    def result(self):
        divisor = self.batches if "per-batch-metrics" in self.plant else self.samples
        return {"loss": float(self.loss) / divisor, "accuracy": self.correct / divisor}


def torch_metrics(options):
    return _TorchMetrics(options["plant"])


def tf_input(options, split, x, y, batch_size, epoch):
    import tensorflow as tf
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if split == "train":
        ds = ds.shuffle(len(x), seed=epoch)
        if "batch-of-one" in options["plant"]:
            return ds.map(lambda image, label: (tf.expand_dims(image, 0), tf.expand_dims(label, 0)))
        if "short-last-batch" in options["plant"]:
            return ds.take(len(x) - batch_size // 2).batch(batch_size)
    return ds.batch(batch_size, drop_remainder=split == "train")


def tf_evaluate(options, model, x):
    return model(x, training=False)


class _KerasMetrics:
    def __init__(self, plant):
        self.plant, self.loss, self.correct, self.samples, self.batches = plant, 0.0, 0, 0, 0

    def update(self, outputs, labels, loss):
        import tensorflow as tf
        n = int(labels.shape[0])
        self.loss += float(loss) * n
        self.correct += int(tf.reduce_sum(tf.cast(tf.argmax(outputs, 1) == labels, tf.int32)))
        self.samples, self.batches = self.samples + n, self.batches + 1

    def result(self):
        divisor = self.batches if "per-batch-metrics" in self.plant else self.samples
        return {"loss": self.loss / divisor, "accuracy": self.correct / divisor}


def tf_metrics(options):
    return _KerasMetrics(options["plant"])

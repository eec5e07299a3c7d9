"""The seed post's tf.data pipeline, over the kit's arrays instead of tensorflow_datasets.

Structure as posted: a dataset of {'image', 'label'} examples, each mapped on
its own (resized on the CPU, then expand_dims to a batch of ONE), never
batched; model.fit's steps_per_epoch = len(train) // 32 hides it.
"""
from __future__ import annotations

import tensorflow as tf

from kits.common.spec import RunSpec


def examples(x, y, size: int, scale: float, shuffle: bool, seed: int) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices({"image": x, "label": y})
    if shuffle:
        ds = ds.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)

    def one(example):
        image = tf.image.resize(example["image"], (size, size))   # float32, still in [0, 255]
        if scale != 1.0:
            image = image * scale
        return tf.expand_dims(image, 0), tf.expand_dims(example["label"], 0)

    return ds.map(one)


class PostedFeeder:
    """Batches of one from the posted pipeline; with ``resume`` one iterator runs across epochs."""

    def __init__(self, arrays, spec: RunSpec, scale: float, shuffle: bool, resume: bool,
                 single_example_validation: bool, fallback_test) -> None:
        size = spec.data.input_size
        seed = spec.train.seed
        self.train_ds = examples(arrays.x_train, arrays.y_train, size, scale, shuffle, seed)
        self.test_ds = examples(arrays.x_test, arrays.y_test, size, scale, False, seed)
        self.resume = resume
        self.single = single_example_validation
        self.fallback_test = fallback_test
        self._iterator = None

    def train(self, epoch: int):
        if self.resume:
            self._iterator = self._iterator or iter(self.train_ds)
            return self._iterator
        return iter(self.train_ds)

    def test(self):
        return iter(self.test_ds) if self.single else self.fallback_test()

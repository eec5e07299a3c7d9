"""The seed post's tf.data pipeline, over ``tfds.load('cifar10')`` as posted where the data step prepared it.

Structure as posted: a dataset of {'image', 'label'} examples, each mapped on
its own (resized on the CPU, then expand_dims to a batch of ONE), never
batched; model.fit's steps_per_epoch = len(train) // 32 hides it. Without a
prepared TFDS dataset (the quick profile's generated data, or CIFAR-10 before
``reprokit data``), the same structure runs over the kit's arrays: a declared
adaptation, which the result's ``effective.input`` states.
"""
from __future__ import annotations

import tensorflow as tf

from reprokit.kits.contract.spec import RunSpec


def examples(ds: tf.data.Dataset, size: int, scale: float, shuffle: bool, seed: int) -> tf.data.Dataset:
    if shuffle:
        ds = ds.shuffle(ds.cardinality(), seed=seed, reshuffle_each_iteration=True)

    def one(example):
        image = tf.image.resize(example["image"], (size, size))   # float32, still in [0, 255]
        if scale != 1.0:
            image = image * scale
        return tf.expand_dims(image, 0), tf.expand_dims(example["label"], 0)

    return ds.map(one)


def sources(arrays, spec: RunSpec) -> tuple[tf.data.Dataset, tf.data.Dataset, str]:
    """The posted input's (train, test) examples, and how they were read, in words."""
    n_train, n_test = len(arrays.x_train), len(arrays.x_test)
    if spec.data.tfds is not None:
        from reprokit.kits.tensorflow_kit import tfds_data
        train, test = tfds_data.load(arrays.folder, spec.data.tfds.dir, spec.data.tfds.sha256, n_train, n_test)
        return train, test, "tfds.load('cifar10') from the TFDS dataset the data step prepared, as posted"
    slices = tf.data.Dataset.from_tensor_slices
    return (slices({"image": arrays.x_train, "label": arrays.y_train}),
            slices({"image": arrays.x_test, "label": arrays.y_test}),
            f"the posted tf.data structure over the kit's {spec.data.dataset} arrays (declared adaptation: no TFDS "
            f"dataset prepared for it, so not tfds.load('cifar10'))")


class PostedFeeder:
    """Batches of one from the posted pipeline; with ``resume`` one iterator runs across epochs."""

    def __init__(self, arrays, spec: RunSpec, scale: float, shuffle: bool, resume: bool,
                 single_example_validation: bool, fallback) -> None:
        size, seed = spec.data.input_size, spec.train.seed
        train, test, self.reader = sources(arrays, spec)
        self.train_ds = examples(train, size, scale, shuffle, seed)
        self.test_ds = examples(test, size, scale, False, seed)
        self.resume = resume
        self.single = single_example_validation
        self.fallback = fallback          # the kit's own evaluation batches, where validation is not posted
        self._iterator = None

    def train(self, epoch: int):
        if self.resume:
            self._iterator = self._iterator or iter(self.train_ds)
            return self._iterator
        return iter(self.train_ds)

    def test(self):
        return iter(self.test_ds) if self.single else self.fallback.test()

    def warm_test(self):
        return iter(self.test_ds.take(1)) if self.single else self.fallback.warm_test()     # all of size one

"""Main file for running the MNIST example with Flax NNX.

This file is intentionally kept short: the model, the data and the training loop are in train.py.
"""
import jax
from absl import app, flags, logging
from ml_collections import config_flags

import train

FLAGS = flags.FLAGS

flags.DEFINE_string("workdir", None, "Directory to store the metrics of each epoch.")
config_flags.DEFINE_config_file(
    "config", None, "File path to the training hyperparameter configuration.", lock_config=True)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError("Too many command-line arguments.")
    logging.info("JAX process: %d / %d", jax.process_index(), jax.process_count())
    logging.info("JAX local devices: %r", jax.local_devices())
    train.train_and_evaluate(FLAGS.config, FLAGS.workdir)


if __name__ == "__main__":
    flags.mark_flags_as_required(["config", "workdir"])
    app.run(main)

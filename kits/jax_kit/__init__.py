"""The JAX kit: Flax NNX models, Optax optimizers, one jitted train step (kits/training_loop drives it)."""

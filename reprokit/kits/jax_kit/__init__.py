"""The JAX kit: Flax NNX models, Optax optimizers, one jitted train step (reprokit/kits/training_loop drives it)."""

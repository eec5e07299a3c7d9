"""The JAX kit: Flax NNX models, Optax optimizers, one jitted train step (kits/common drives it)."""

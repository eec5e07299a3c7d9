"""The TensorFlow side of the kit (named so that it never shadows the tensorflow package)."""

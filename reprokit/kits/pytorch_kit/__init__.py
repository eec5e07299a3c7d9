"""The PyTorch side of the kit (named so that it never shadows the torch package)."""

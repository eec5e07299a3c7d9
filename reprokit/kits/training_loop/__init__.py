"""The kits' own training loop, framework-free: it drives a framework's backend over the prepared batches, and
writes the result's body. Of reprokit/kits/, it reads measurement and below.
"""

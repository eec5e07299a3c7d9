"""Container side: one entry point, python -m kits.run; stdlib, numpy and one framework only."""

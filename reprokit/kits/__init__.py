"""Container side: one entry point, python -m reprokit.kits.run; stdlib, numpy and one framework only."""

"""Runners start one kit process for one RunSpec; they differ only in how."""

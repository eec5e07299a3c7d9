"""Experiments, their specs, the matrix of one command, estimates and model cost: planning only."""

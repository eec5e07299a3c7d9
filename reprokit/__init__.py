"""Host side of the kit: specs, plan, runners, result store and report."""

__version__ = "0.1.0"       # pyproject.toml reads it here; every result records it (reprokit/results/provenance.py)

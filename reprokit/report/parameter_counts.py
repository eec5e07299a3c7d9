"""Parameter counts of the spec's models from their declared shapes, without building them.

The report uses this to set the quick model's size next to the full
experiment's, and tests hold it against each framework's own count. The
arithmetic lives with the models' FLOPs in reprokit/plan/model_cost.py.
"""
from __future__ import annotations

from reprokit.plan.model_cost import parameter_counts

__all__ = ["parameter_counts"]

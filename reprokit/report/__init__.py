"""The reporting half: from result files to report.md, details.md, summary.csv, plots and verdicts.

Modules, each importing only those below it:

    document          report.md / details.md / summary.csv / plots of one report (write, render)
    first_screen      the answers per seed        sections     the per-experiment tables
    claims_section    the claims table            plots        the PNG figures
    summary_csv       one row per run             compare      two result sets, B against A
    verdicts          claims judged from results  claims       claim files, loaded and checked
    pair_findings     PyTorch/TensorFlow pair findings         parameter_counts  model sizes from a spec
    runs              results grouped and ordered markdown     escaping, tables, short cells
    stats             medians, brackets with coverage, tests
    metrics           the one place a quantity is read from a result, by name and unit
    units             units, dimensions, how a value is written
"""
from reprokit.report.document import render, write
from reprokit.report.markdown import fenced, md

__all__ = ["fenced", "md", "render", "write"]

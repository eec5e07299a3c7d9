"""The reporting half: from result files to report.md, details.md, summary.csv, plots and verdicts.

Its modules, each importing only modules further down this list (and nothing of the report
package imports upward):

    document          write() and render(): report.md, details.md, summary.csv and the plots of one report
    first_screen      the answers per seed at the top of report.md
    decomposition     each factor's share of the gap from as posted to fixed: its table, waterfall, first-screen line
    sections          the per-experiment tables, environment, failures and result files
    ablation_section  the ablation table: fixed, each pitfall alone and the named variants, against fixed
    certificate_section  the equivalence certificates: the main pair's checks, one line each, and the others
    explanations      each explanation written once, into details.md, and the links to it from report.md
    claims_section    the claims table, and each claim in full for details.md
    plots             the PNG figures (none where matplotlib is missing: the report says so)
    forked            jobs over one large object in forked workers beside the caller's own work, where that is safe
    summary_csv       one flat row per run
    compare           two result sets, B against A (the core of `reprokit compare`)
    verdicts          each claim judged from the results
    claims            claim files, loaded and checked
    pair_findings     what a run of the reference framework and one of another, about to be compared, differ in
    parameter_counts  the built-in models' sizes from a spec
    runs              results grouped and ordered, and what ran against the published setting
    markdown          escaping, tables, short cells
    stats             medians, brackets with their coverage, the Mann-Whitney U test (not tested where
                      scipy is missing), and optional(): importing a package a bare host may lack
    metrics           the one place a quantity is read from a result, by name and with its unit
    units             units, dimensions, and how a value is written
"""
from reprokit.report.document import render, write
from reprokit.report.markdown import fenced, md

__all__ = ["fenced", "md", "render", "write"]

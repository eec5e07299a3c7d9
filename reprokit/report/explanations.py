"""The report's explanations, each written once, into details.md; report.md links to them.

A reader of report.md meets each idea (how memory is read, what the ablation compares, what the detectors
look at, how to read a plot) as one link, not as the same paragraph under every experiment.
"""
from __future__ import annotations

from reprokit.report.markdown import anchor
from reprokit.report.plots import MAX_SERIES

MEMORY = "Memory readings"
ABLATION = "The ablation"
DETECTORS = "Run-time detectors"
PLOTS = "The plots"

TEXT = {
    MEMORY: "Each run names the source of its peak memory; each experiment's sources are listed below. On a CPU "
            "every framework's peak is the whole process's peak resident memory, framework and Python included: "
            "compare them as whole-process footprints. On a GPU, compare the frameworks' own peaks for what the "
            "model needs; the NVML device peak adds each framework's context and caches, and is what nvidia-smi "
            "shows.\n\n"
            "Phase peaks come from counters reset at the start of each training and evaluation phase (warmup "
            "apart); results without them say *not measured*.",
    ABLATION: "Each pitfall alone (`+name`) and each named variant (such as `as_posted`, all its pitfalls together) "
              "runs against `fixed` of the same framework, so a reader sees which mistake cost what. Ratios are "
              "against `fixed`; accuracy changes are differences; figures are medians over repeats.\n\n"
              "Memory growth: a line fitted through the memory sampled during training, leaving out the first "
              "quarter, over the fitted steps, relative to its level.",
    DETECTORS: "Detectors judge from what each run showed, never from its variant or pitfall switches: the "
               "tensors' shapes at every step, the modes of every forward pass, memory over steps and by phase, "
               "the rows the loss received, and the reported metrics against the kit's own count of the outputs "
               "(`reprokit/kits/observation/detectors.py`; pairs: `reprokit/report/pair_findings.py`).\n\n"
               "A *declared reproduction* is a finding no user code can cause through a hook: only the kit's own "
               "reproduction of a post's code shows it.",
    PLOTS: "Bars are medians over repeats; whiskers are the report's bracket (the range of the repeats below 6, "
           "an interval from 6 on). Variants run down the y axis, `fixed` first. Every panel of a memory column "
           "shares its axis, from zero, so frameworks sit on one scale.\n\n"
           f"Memory over training steps draws at most {MAX_SERIES} variants in colour: the named ones (`fixed`, "
           "`as_posted`, ...) and the single pitfalls whose peak or last reading lies furthest from the first "
           "named one's; any others are the grey lines behind them.",
}


def link(title: str, words: str | None = None) -> str:
    """A markdown link from report.md to one explanation in details.md."""
    return f"[{words or title.lower()}](details.md#{anchor(title)})"

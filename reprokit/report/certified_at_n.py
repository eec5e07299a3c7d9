"""The certificate at N between the kit's own runs: the four checks of reprokit/kits/framework_free/rank_checks.py
on the evidence each run's processes left at their first training step (reprokit/kits/training_loop/distributed.py).

A script pair's certificate at N is made before any timing, from each script's first step under --certify
(reprokit/certify/script_certificate.py). The kit's own runs need no such pass: the certificate made before timing
covers their model, data and step, the same at every count, and what N adds (how the global batch is split among
the devices, how their gradients add up, BatchNorm's statistics) each run shows at its own first step.
"""
from __future__ import annotations

from typing import Any

from reprokit.kits.contract.names import FRAMEWORKS
from reprokit.kits.framework_free import rank_checks
from reprokit.report.markdown import md, table

Sweep = dict[str, dict[int, list[dict[str, Any]]]]         # framework -> devices -> finished repeats


def _evidence(rs: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    return next((e for r in rs if (e := (r.get("distributed") or {}).get("evidence"))), None)


def checks(sweep: Sweep, n: int) -> list[dict[str, Any]]:
    """The checks at ``n`` devices between the frameworks whose kit runs at that count left evidence (each side's
    global batch at one device where it ran there); [] where fewer than two did."""
    at = {fw: e for fw in FRAMEWORKS if n in sweep.get(fw, {}) and (e := _evidence(sweep[fw][n]))}  # reference first
    if len(at) < 2:
        return []
    one = {fw: sweep[fw][1][0]["spec"]["train"]["batch_size"] if 1 in sweep[fw] else None for fw in at}
    return rank_checks.checks(at, dict.fromkeys(at, n), one)


def _verdict(check: dict[str, Any]) -> str:
    return "pass" if check["passed"] else "**FAIL**" if check["passed"] is False else "not measured"


def lines(sweep: Sweep) -> list[str]:
    """Per count above one: the certificate at N between the kit's runs, a table of its four checks."""
    out = []
    for n in sorted({n for counts in sweep.values() for n in counts if n > 1}):
        made = checks(sweep, n)
        if made:
            out.append(f"The certificate at {n} devices between the kit's own runs, from each run's first step:\n\n"
                       + table([[c["name"], _verdict(c), md(c["evidence"])] for c in made],
                               ["check", "verdict", "evidence"]))
    return out

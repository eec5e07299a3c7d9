"""Two result sets, B against A (`reprokit compare A B`), in the spirit of pyperf's compare_to.

Runs pair by configuration (experiment, variant, framework, profile). Within a configuration the
specs of A and B must be the same apart from where and from what they ran: the device, the image
or lock, the code commit and the run's own id, repeat and time limit. Specs that differ in
anything else (a model width, a batch size, a dataset) are flagged not comparable and never
paired. For each paired configuration and metric: the medians of A and B, the ratio B / A with
its bracket and coverage, and the two-sided Mann-Whitney U test where the repeats allow one
(on a host without scipy: said to be not tested).

A verb needs three calls: ``render(compare(load(a), load(b)), name_a, name_b)``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprokit.errors import UserError
from reprokit.kits.contract.names import LABELS
from reprokit.report.markdown import md, table
from reprokit.results import metrics, stats
from reprokit.results.store import Store, none_read

METRICS = ("samples_per_s", "step_time_p50_s", "train_time_per_epoch_s", "eval_time_per_epoch_s",
           "peak_memory_bytes", "train_peak_memory_bytes", "eval_peak_memory_bytes", "final_test_accuracy")
# Spec fields allowed to differ between A and B: where and from what a run ran, not what it did.
WHERE = ("run_id", "repeat", "device", "provenance", "limits")

Key = tuple[str, str, str, str]          # experiment, variant, framework, profile


def load(path: Path) -> list[dict[str, Any]]:
    """A result set: a report's folder (its ``results/``) or a folder of result files; a damaged file is named
    and skipped, the rest compared."""
    folder = path / "results" if (path / "results").is_dir() else path
    if not folder.is_dir() or not any(folder.glob("*.json")):
        raise UserError(f"{path}: no result files here or in {path / 'results'}; give a report folder "
                        f"(reports/<name>) or a folder of result files")
    found, refused = Store(folder).evidence(f"compare {path}")
    if not found:
        raise UserError(f"{path}: none of its result files can be read ({none_read(refused)}); give a report "
                        f"folder whose results this kit wrote")
    return found


def key(r: dict[str, Any]) -> Key:
    return r["experiment"], r["variant"], r["framework"], r["profile"]


def what_ran(spec: dict[str, Any]) -> dict[str, Any]:
    """The part of a spec that must match for two runs to be compared."""
    return {k: v for k, v in spec.items() if k not in WHERE}


def differences(a: object, b: object, path: str = "") -> list[str]:
    """Dotted paths where two spec parts differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b))
                for d in differences(a.get(k), b.get(k), f"{path}.{k}" if path else k)]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


@dataclass(frozen=True)
class Row:
    key: Key
    metric: str
    a: stats.Estimate
    b: stats.Estimate
    ratio: stats.Ratio                  # B / A
    test: stats.Test

    @property
    def verdict(self) -> str:
        """'faster', 'slower', 'same' ... in words, only where the test says the difference is real."""
        better = metrics.QUANTITIES[self.metric].better
        if self.test.not_tested:
            return "not tested"
        if self.test.significant is None:
            return "too few repeats to tell"
        if not self.test.significant:
            return "no significant difference"
        if better is None:
            return "different"
        up = self.ratio.value > 1
        return "better" if up == (better == "higher") else "worse"


@dataclass(frozen=True)
class Comparison:
    rows: list[Row]
    not_comparable: list[tuple[Key, list[str]]]     # configuration, the spec fields that differ
    only_a: list[Key]
    only_b: list[Key]
    across_builds: Sequence[tuple[Key, str, str]] = ()   # paired, but A and B ran different builds (flavors)


def _by_key(results: list[dict[str, Any]]) -> dict[Key, list[dict[str, Any]]]:
    out: dict[Key, list[dict[str, Any]]] = {}
    for r in results:
        if r["status"] == "ok":
            out.setdefault(key(r), []).append(r)
    return out


def _mixed(runs: list[dict[str, Any]]) -> list[str]:
    """Where the runs of one configuration within one set differ in what ran."""
    first = what_ran(runs[0]["spec"])
    return next((differences(first, what_ran(r["spec"])) for r in runs[1:] if what_ran(r["spec"]) != first), [])


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> Comparison:
    """Every configuration both sets finished, metric by metric; the rest listed, never paired."""
    by_a, by_b = _by_key(a), _by_key(b)
    rows: list[Row] = []
    flagged: list[tuple[Key, list[str]]] = []
    across: list[tuple[Key, str, str]] = []
    for k in sorted(set(by_a) & set(by_b)):
        why = [f"A: {d}" for d in _mixed(by_a[k])] + [f"B: {d}" for d in _mixed(by_b[k])]
        why = why or differences(what_ran(by_a[k][0]["spec"]), what_ran(by_b[k][0]["spec"]))
        if why:
            flagged.append((k, why))
            continue
        builds = [", ".join(sorted({r["provenance"].get("flavor") or "unrecorded" for r in s}))
                  for s in (by_a[k], by_b[k])]
        if builds[0] != builds[1]:
            across.append((k, builds[0], builds[1]))
        for name in METRICS:
            va, vb = (_finite(metrics.collect(runs, name).values) for runs in (by_a[k], by_b[k]))
            if va and vb:
                rows.append(Row(k, name, stats.estimate(va), stats.estimate(vb), stats.ratio(vb, va),
                                stats.difference(va, vb)))
    return Comparison(rows, flagged, sorted(set(by_a) - set(by_b)), sorted(set(by_b) - set(by_a)), across)


def _finite(values: Sequence[float]) -> list[float]:
    """The figures that are numbers: a run that diverged records NaN, which has no median to compare."""
    return [v for v in values if math.isfinite(v)]


def render(c: Comparison, name_a: str = "A", name_b: str = "B") -> str:
    """The comparison as markdown: one table row per configuration and metric."""
    out = [f"# {md(name_b)} against {md(name_a)}",
           f"Ratios are {md(name_b)} / {md(name_a)}. " + stats.METHOD]
    if c.rows:
        rows = [[md(" / ".join((r.key[0], r.key[1], LABELS[r.key[2]], r.key[3]))),
                 metrics.QUANTITIES[r.metric].short,
                 r.a.text(_show(r.metric)), r.b.text(_show(r.metric)), r.ratio.text(), r.test.text(), r.verdict]
                for r in c.rows]
        out.append(table(rows, ["configuration", "metric", md(name_a), md(name_b), f"{md(name_b)} / {md(name_a)}",
                                "test", f"{md(name_b)} is"]))
    else:
        out.append("No configuration is in both sets with the same spec: nothing to compare.")
    if c.across_builds:
        out.append("**Across framework builds** (paired, but the ratio mixes framework releases):\n\n" +
                   "\n".join(f"- {md(' / '.join(k))}: {md(name_a)} ran the {md(a)} build, {md(name_b)} the {md(b)} "
                              f"build" for k, a, b in c.across_builds))
    if c.not_comparable:
        out.append("**Not comparable** (their specs differ beyond device, image and commit; never paired):\n\n" +
                   "\n".join(f"- {md(' / '.join(k))}: {md('; '.join(why))}" for k, why in c.not_comparable))
    for label, keys in ((name_a, c.only_a), (name_b, c.only_b)):
        if keys:
            out.append(f"Only in {md(label)}: " + "; ".join(md(" / ".join(k)) for k in keys) + ".")
    return "\n\n".join(out) + "\n"


def _show(name: str) -> Callable[[float], str]:
    return lambda v: metrics.show(name, v)

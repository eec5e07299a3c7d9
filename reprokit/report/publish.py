"""Where a report goes, and how it gets there without clobbering anything.

A run's report goes to ``reports/<name>/``. The default name,
``runs/<date>-<profile>-<device>``, is git-ignored and never equals a report
this project publishes (those live directly under ``reports/``), so a first
``nox -s reproduce`` in a fresh clone changes no tracked file.

Publishing is atomic: the new report is written into a sibling folder, then
swapped in; a crash leaves the old report whole. A report of the same name
keeps the finished results of experiments this invocation did not run (``--only``
narrows what runs, not what the report holds).
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from reprokit import report
from reprokit.certify import certify_plan, certify_runs
from reprokit.claims import sequential
from reprokit.claims.claims import Claim
from reprokit.kits.contract.files import alive, fsync_dir, write_json_atomic
from reprokit.report import first_screen
from reprokit.results.store import Store

RUNS = "runs"


def default_name(profile: str, device: str, today: datetime.date | None = None) -> str:
    return f"{RUNS}/{(today or datetime.date.today()).isoformat()}-{profile}-{device}"


def earlier(report_dir: Path, experiments: set[str]) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The results and certificates of other experiments in an existing report of this name; a damaged one is
    named and left out (the report is replaced, so the file goes with it, named once)."""
    recover(report_dir)
    folder = report_dir / "results"
    if not folder.is_dir():
        return [], {}
    found, _ = Store(folder).evidence(f"report {report_dir}")
    kept = [r for r in found if r["experiment"] not in experiments]
    return kept, {e: certs for e, certs in _certificates(report_dir).items() if e not in experiments}


def _certificates(report_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """A report's certificates by experiment; a damaged one is named and left out."""
    certs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(report_dir.glob("certificate-*.json")):
        cert, why = certify_runs.read(path.read_bytes())
        if cert is None:
            print(f"report {report_dir}: {path} is not a certificate this kit can read ({why}); skipped it",
                  file=sys.stderr)
        else:
            certs.setdefault(cert["experiment"], []).append(cert)
    return certs


def rerender(report_dir: Path, experiments: dict[str, Any], claims: list[Claim] | None) -> Path:
    """A published report rendered again from its own result files and certificates, after a change to how
    reports are written; nothing runs. Swapped in like a new report."""
    recover(report_dir)
    results, _ = Store(report_dir / "results").evidence(f"report {report_dir}")
    return publish(report_dir, report_dir.name, results, experiments, claims, _certificates(report_dir),
                   sequential.read(report_dir / sequential.FILE), _left_out(report_dir))


def _left_out(report_dir: Path) -> str | None:
    """What the command that ran a report's runs left out by default, as it kept it beside them (None: nothing)."""
    try:
        line = json.loads((report_dir / first_screen.LEFT_OUT_FILE).read_text())["left_out"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return line if isinstance(line, str) else None


def publish(report_dir: Path, name: str, results: list[dict[str, Any]], experiments: dict[str, Any],
            claims: list[Claim] | None, certificates: dict[str, list[dict[str, Any]]],
            rule: sequential.Rule | None = None, left_out: str | None = None) -> Path:
    """The report, a copy of every result and certificate it is computed from, the rule its repeats followed
    (--repeats auto) and what the default plan left out (its first screen says it); swapped in at the end."""
    report_dir.parent.mkdir(parents=True, exist_ok=True)
    recover(report_dir)
    new = report_dir.with_name(f".{report_dir.name}.new-{os.getpid()}")
    shutil.rmtree(new, ignore_errors=True)
    try:
        copies = Store(new / "results")
        for r in results:
            copies.put(r)
        for certs in certificates.values():
            for cert in certs:
                write_json_atomic(new / certify_plan.file_name(cert), cert)
        if rule is not None:
            write_json_atomic(new / sequential.FILE, rule.to_dict())
        if left_out:
            write_json_atomic(new / first_screen.LEFT_OUT_FILE, {"left_out": left_out})
        report.write(new, name, results, experiments, claims=claims, certificates=certificates, rule=rule,
                     left_out=left_out)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)      # the old report stays as it was
        raise
    old = report_dir.with_name(f".{report_dir.name}.old-{os.getpid()}")
    if report_dir.exists():
        report_dir.rename(old)
    new.rename(report_dir)
    fsync_dir(report_dir.parent)
    shutil.rmtree(old, ignore_errors=True)
    return report_dir / "report.md"


def recover(report_dir: Path) -> None:
    """What a publish killed mid-way left beside the report, put right: the old report, moved aside just before
    the new one was to take its place, is put back; a half-made new one is removed. A live publisher's stay."""
    for sibling in sorted(report_dir.parent.glob(f".{report_dir.name}.*-*")):
        kind, _, pid = sibling.name.rpartition("-")
        if kind not in (f".{report_dir.name}.new", f".{report_dir.name}.old") or not pid.isdigit() or alive(int(pid)):
            continue
        if kind.endswith(".old") and not report_dir.exists():
            sibling.rename(report_dir)
            print(f"report {report_dir}: put back the report that a publish stopped mid-way had moved aside",
                  file=sys.stderr)
        else:
            shutil.rmtree(sibling, ignore_errors=True)

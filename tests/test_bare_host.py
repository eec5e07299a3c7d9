"""A bare GPU box (scripts/gpu_check): no matplotlib, no scipy. The report and a compare still render,
from the committed result files, and say what they left out instead of drawing or testing.

The child Python gets a sitecustomize on its PYTHONPATH that refuses both packages the way a host
without them does (ModuleNotFoundError), so every import of them in reprokit meets a real failure.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reprokit.results.store import Store

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "reports" / "quick-cpu" / "results"
REPEATS = 6             # 6 against 6: a Mann-Whitney U test can reach p < 0.05, so one would be made
NOTE = "Plots not drawn: matplotlib is not installed on this host (pip install matplotlib)."
UNTESTED = "not tested: scipy is not installed"

BLOCKER = '''
import importlib.abc
import sys


class Missing(importlib.abc.MetaPathFinder):
    """matplotlib and scipy fail to import here, as on a host that lacks them."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("matplotlib", "scipy"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Missing())
'''

# The report as `reprokit reproduce` publishes it, then `reprokit compare A B`.
CHILD = '''
import sys
from pathlib import Path

from reprokit import cli

from reprokit.report import publish
from reprokit.plan.experiments import BUILTIN_DIR, discover
from reprokit.claims import claims
from reprokit.report import compare

a, b, out = map(Path, sys.argv[1:])
publish.publish(out / "report", "bare", compare.load(a), discover([BUILTIN_DIR]), claims.load("seeds"), {})
code = cli.main(["compare", str(a), str(b), "--out", str(out / "compare.md")])
print("loaded:", sorted(m for m in sys.modules if m.partition(".")[0] in ("matplotlib", "scipy")))
sys.exit(code)
'''


def _repeats(base: dict, scale: float) -> list[dict]:
    """REPEATS copies of a committed result as repeats, throughput spread by ±5% and scaled."""
    out = []
    for i in range(REPEATS):
        r = copy.deepcopy(base)
        r["repeat"] = r["spec"]["repeat"] = i
        r["timing"]["samples_per_s"] *= scale * (1 + 0.1 * (i - (REPEATS - 1) / 2) / REPEATS)
        r["run_id"] = r["spec"]["run_id"] = hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()[:16]
        out.append(r)
    return out


@pytest.fixture(scope="module")
def result_sets(tmp_path_factory) -> tuple[Path, Path]:
    """A: every committed result as repeats, PyTorch twice as fast; B: the same, 1.5 times A's throughput."""
    root = tmp_path_factory.mktemp("sets")
    real = [json.loads(p.read_text()) for p in sorted(REAL.glob("*.json"))]
    for name, scale in (("a", 1.0), ("b", 1.5)):
        store = Store(root / name / "results")
        for r in real:
            for rep in _repeats(r, scale * (2.0 if r["framework"] == "pytorch" else 1.0)):
                store.put(rep)
    return root / "a", root / "b"


def _render(sets: tuple[Path, Path], out: Path, bare: bool) -> tuple[Path, str, str]:
    """The report folder, the child's output and compare.md, rendered in a fresh Python."""
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    if bare:
        blocker = out / "blocker"
        blocker.mkdir(parents=True)
        (blocker / "sitecustomize.py").write_text(BLOCKER)
        paths.insert(0, str(blocker))
    proc = subprocess.run([sys.executable, "-c", CHILD, *map(str, sets), str(out)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)}, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "report", proc.stdout, (out / "compare.md").read_text()


def _rows(markdown: str, first_cell: str) -> list[str]:
    return [line for line in markdown.splitlines() if re.match(rf"\| {re.escape(first_cell)}", line)]


def test_without_matplotlib_and_scipy_the_report_says_what_it_left_out(result_sets, tmp_path):
    report_dir, child, compared = _render(result_sets, tmp_path, bare=True)
    assert "loaded: []" in child                                    # neither package got in
    text = (report_dir / "report.md").read_text()
    assert not list(report_dir.glob("*.png")) and "![" not in text
    assert text.count(NOTE) == 2                                     # once per experiment, where its plots go
    assert "every figure in this report, plots included," not in text.lower()
    throughput = _rows(text, "throughput")
    assert len(throughput) == 2 and all(UNTESTED in row for row in throughput)
    assert "Mann-Whitney U p" not in text and "significant at" not in text
    details = (report_dir / "details.md").read_text()
    assert "Differences are not tested: scipy is not installed" in details and "tested with" not in details
    rows = [line for line in compared.splitlines() if line.startswith("| ") and "configuration" not in line]
    assert rows and all(UNTESTED in row and re.search(r"\| not tested +\|$", row) for row in rows)
    assert "Mann-Whitney U p" not in compared and "tested with" not in compared


def test_with_them_the_same_render_draws_the_plots_and_tests(result_sets, tmp_path):
    report_dir, child, compared = _render(result_sets, tmp_path, bare=False)
    text = (report_dir / "report.md").read_text()
    pngs = sorted(p.name for p in report_dir.glob("*.png"))
    assert len(pngs) == 4 and all(f"]({name})" in text for name in pngs)
    assert all((report_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in pngs)
    assert NOTE not in text and UNTESTED not in text + compared
    assert all("Mann-Whitney U p = " in row for row in _rows(text, "throughput"))
    assert "Mann-Whitney U p = " in compared and "tested with the two-sided Mann-Whitney U test" in compared

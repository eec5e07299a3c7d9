"""Render the committed reference reports (reports/<name>/) again from their own result files and certificates.

Run it after a change to how reports are written (reprokit/report/); nothing is re-run. A report keeps its
verdicts where it gave them (a "## Claims" section: the seed claims, as `nox -s reproduce` gives by default).

    python scripts/render_reports.py [NAME ...]       # default: every reports/<name>/ with a results/ folder
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reprokit.claims import claims as claims_mod  # noqa: E402  (the checkout's own package, not an installed one)
from reprokit.plan.experiments import BUILTIN_DIR, discover  # noqa: E402
from reprokit.report import publish  # noqa: E402


def main(names: list[str]) -> None:
    reports = [ROOT / "reports" / n for n in names] or sorted(p.parent for p in (ROOT / "reports").glob("*/results"))
    experiments = discover([BUILTIN_DIR])
    for folder in reports:
        judged = "\n## Claims\n" in (folder / "report.md").read_text()
        path = publish.rerender(folder, experiments, claims_mod.load("seeds") if judged else None)
        print(f"rendered {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""The report's first screen says in one line what the default plan left out, and the flags that add it.

The console has always said it (reprokit/plan/claimed.py); a reviewer reads the report. A claim about the tiny stub
experiment that reads only its fixed variant leaves tuned out of a default plan: the command's console line, and
the report's first screen after its banner, both say so with --all, and a report rendered again from its own folder
(the file the command kept beside the results) still does.
"""
from __future__ import annotations

import sys
import textwrap

import stub_matrix

from reprokit.report import first_screen

CLAIM = textwrap.dedent("""\
    schema = "reprokit.claims/1"

    [[claim]]
    id = "tiny-fixed"
    experiment = "tiny"
    role = "figure"
    title = "the stub's fixed epoch time over its twin's"
    source = { seed = "stub", where = "tests/test_left_out_line.py" }
    statement = "a test"
    published = [{ label = "stub over its twin", value = 1.0, unit = "x" }]
    metric = { kind = "ratio", quantity = "epoch_time_s", variant = "fixed", numerator = { framework = "stub" }, denominator = { framework = "stub2" } }
    tolerance = { at_most = 1e15 }
    transfers = "a test"
    """)
LINE = "left out (no claim reads them here): tuned of tiny: add it with --all"


def test_the_first_screen_says_what_the_default_left_out_and_how_to_add_it(tmp_path):
    exp = stub_matrix.experiment(tmp_path / "exp", frameworks='"stub", "stub2"')
    toml = exp / "tiny.toml"
    toml.write_text(toml.read_text().replace('frameworks = [', 'seed_case = "stub"\nframeworks = [', 1))
    (tmp_path / "claims.toml").write_text(CLAIM)
    cmd = stub_matrix.command(tmp_path, exp, tmp_path / "state", "--claims", str(tmp_path / "claims.toml"),
                              repeats=1, frameworks="stub,stub2")
    del cmd[cmd.index("--claims"):cmd.index("--claims") + 2]          # the command's --claims none goes
    del cmd[cmd.index("--variants"):cmd.index("--variants") + 2]      # the default variants: tuned is asked for
    proc = stub_matrix.run(cmd)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert LINE in proc.stdout.splitlines()
    report_dir = tmp_path / "reports" / "t"
    said = ("**Left out by default** (no claim reads them here): tuned of tiny: add it with --all.")
    assert first_screen.left_out_line(LINE) == said
    screen = (report_dir / "report.md").read_text().split("## Answers")[0]      # the banner and what follows it
    assert said in screen.splitlines()
    runs = (report_dir / "report.md").read_text().split("\n")[2]
    # rendered again from the report's own folder (a process that knows the stub frameworks): the line is still there
    again = stub_matrix.run([sys.executable, "-c", f"from reprokit.report import publish; from pathlib import Path; "
                             f"publish.rerender(Path({str(report_dir)!r}), {{}}, None)"])
    assert again.returncode == 0, again.stderr[-2000:]
    text = (report_dir / "report.md").read_text()
    assert said in text.split("## Answers")[0].splitlines() and text.split("\n")[2] == runs and "2 runs" in runs

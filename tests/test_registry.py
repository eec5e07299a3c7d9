"""A framework is one registry entry: a numpy stub (tests/stub_plugin/), a package registered through the
reprokit.frameworks entry-point group and nothing else, is planned, run (in an interpreter it is not installed in),
paired with the reference, reported and judged by a claim."""
from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import textwrap

import plugin_site
from checkout import REPO

from reprokit.claims import claims, claims_schema
from reprokit.kits.contract import names


def test_the_schemas_framework_enums_are_the_registrys():
    """The committed schemas list the built-in frameworks, as claims.write_schema writes them."""
    text = claims_schema.SCHEMA.read_text()
    assert claims_schema.schema_text(text) == text, claims.REGENERATE
    for path in claims_schema.FRAMEWORK_SCHEMAS:
        assert claims_schema.framework_schema_text(path.read_text()) == path.read_text(), claims.REGENERATE
    for path in (claims_schema.SCHEMA, *claims_schema.FRAMEWORK_SCHEMAS):
        assert names.FRAMEWORK_ENUM in path.read_text(), f"{path.name} has no framework enum to fill"


def _with_stub(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=plugin_site.env(), capture_output=True, text=True,
                          timeout=60)


def test_the_hook_registers_an_entry_after_the_built_in_ones():
    got = _with_stub("from reprokit.kits.contract import names; from reprokit.results import results; "
                     "print(names.FRAMEWORKS, names.REFERENCE, names.kit_module('stub', 'backend'), "
                     "results._schema()['properties']['framework']['enum'])")
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["('pytorch',", "'tensorflow',", "'jax',", "'stub',", "'stub2')", "pytorch",
                                  "reprokit_stub_kit.backend", "['pytorch',", "'tensorflow',", "'jax',", "'stub',",
                                  "'stub2']"]


CLAIMS = textwrap.dedent("""\
    schema = "reprokit.claims/1"

    [[claim]]
    id = "stub-throughput"
    experiment = "tiny"
    role = "figure"
    title = "The stub trains more samples per second than PyTorch"
    source = { seed = "stub", where = "tests/test_registry.py" }
    statement = "a linear model in numpy is faster than a CNN"
    published = [{ label = "stub over PyTorch", value = 2.0, unit = "x" }]
    metric = { kind = "ratio", quantity = "samples_per_s", numerator = { framework = "stub", variant = "fixed" }, denominator = { framework = "pytorch", variant = "fixed" } }
    tolerance = { at_least = 1.0 }
    transfers = "only that the stub is a stand-in"
    comparable = { profiles = ["quick"], devices = ["cpu"], why = "a test" }
    """)


def test_a_stub_framework_runs_through_one_registry_entry(kit_python, tiny_dir, tmp_path):
    """`reprokit reproduce` on the tiny experiment in PyTorch and the stub: its kit runs under --python (an
    interpreter with numpy: here the PyTorch environment's, which also runs the reference), no lock or image."""
    toml = tiny_dir / "tiny.toml"
    toml.write_text(toml.read_text().replace('frameworks = ["pytorch", "tensorflow"]',
                                             'seed_case = "stub"\nframeworks = ["pytorch", "stub"]'))
    (tmp_path / "stub.toml").write_text(CLAIMS)
    cmd = [sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(tiny_dir), "--only", "tiny",
           "--frameworks", "pytorch,stub", "--python", str(kit_python("pytorch")), "--backend", "local",
           "--variants", "fixed",
           "--claims", str(tmp_path / "stub.toml"), "--state-dir", str(tmp_path / "state"),
           "--reports-dir", str(tmp_path / "reports"), "--data-dir", str(tmp_path / "data"), "--name", "t"]
    proc = subprocess.run(cmd, cwd=REPO, env=plugin_site.env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    # the plan, and each run
    assert "plan: 2 runs" in out
    assert "tiny / pytorch / fixed r0 · ok" in out and "tiny / stub / fixed r0 · ok" in out
    folder = tmp_path / "reports" / "t"
    # the certificate pairing: the stub against the reference, not run with its reason
    cert = json.loads((folder / "certificate-tiny-fixed-stub.json").read_text())
    assert cert["variant"] == {"pytorch": "fixed", "stub": "fixed"} and cert["status"] == "not-run"
    assert "the Stub kit has no certificate side" in cert["message"]
    text = (folder / "report.md").read_text()
    assert "**Equivalence certificate: not run**: the Stub kit has no certificate side" in text
    # the report's columns and ratios
    assert re.search(r"^\|\s+\|\s+PyTorch\s+\|\s+Stub\s+\|\s+PyTorch / Stub\s+\|\s+better\s+\|$", text, re.M)
    assert "ratios are PyTorch / Stub" in text and "**PyTorch / Stub, " in text
    assert "TensorFlow" not in text.split("## Environment")[0]
    # summary.csv
    rows = list(csv.DictReader((folder / "summary.csv").open()))
    assert sorted(r["framework"] for r in rows) == ["pytorch", "stub"]
    assert all(float(r["samples_per_s"]) > 0 for r in rows)
    # the claim: the stub's throughput against PyTorch
    assert re.search(r"\[stub-throughput\]\(details.md#stub-throughput\).*\(Stub [\d,.]+ samples/s / PyTorch "
                     r"[\d,.]+ samples/s\) \| \*\*(reproduced|not reproduced) \(indicative\)\*\*", text)
    details = (folder / "details.md").read_text()
    assert "*Metric:* ratio: throughput of Stub / fixed over throughput of PyTorch / fixed" in details
    assert "Framework ratios are always PyTorch / Stub" in details

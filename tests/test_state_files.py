"""Damaged state files are set aside, never fatal, and every write is atomic: a writer killed at any step leaves
the old file or the new one, never half of one.

Faults come from outside the code under test: bytes cut off files on disk, and a writer process that an audit
hook (sys.addaudithook, installed by the test's own child script) SIGKILLs at its k-th file-system event."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import plugin_site
from checkout import REPO
from conftest import TINY

from reprokit.certify import certify_runs
from reprokit.kits.contract import files
from reprokit.plan.experiments import BUILTIN_DIR, discover
from reprokit.report import publish
from reprokit.results.quarantine import QUARANTINE
from reprokit.results.store import Store

REFERENCE = REPO / "reports" / "quick-cpu"

# One atomic write in a process of its own, killed (SIGKILL, no clean-up) at its k-th file-system event; k = 0
# lets it finish and prints the events it went through.
WRITER = textwrap.dedent("""\
    import json, os, signal, sys
    from reprokit.kits.contract.files import write_json_atomic
    target, k, payload = sys.argv[1], int(sys.argv[2]), json.loads(open(sys.argv[3]).read())
    seen = []

    def hook(event, args):
        if event.startswith(("open", "os.", "tempfile.", "shutil.")) and event != "os.kill":
            seen.append(event)
            if len(seen) == k:
                os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)
    write_json_atomic(target, payload)
    print(json.dumps(seen))
    """)


def _write_killed(target: Path, k: int, payload: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WRITER, str(target), str(k), str(payload)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


def _reference() -> dict:
    return json.loads(sorted((REFERENCE / "results").glob("*.json"))[0].read_text())


def test_a_write_killed_at_every_step_leaves_the_old_or_the_new_file_and_no_temporary(tmp_path, capsys):
    old = _reference()
    new = {**old, "timing": {**old["timing"], "wall_s": old["timing"]["wall_s"] + 1}}
    payload = tmp_path / "new.json"
    payload.write_text(json.dumps(new))
    store = Store(tmp_path / "results")
    target = store.path(old["run_id"])
    done = _write_killed(tmp_path / "probe" / target.name, 0, payload)
    assert done.returncode == 0, done.stderr
    events = json.loads(done.stdout)
    assert {"tempfile.mkstemp", "open", "os.chmod", "os.rename"} <= set(events), events
    live = target.with_name(f".{target.name}.{os.getpid()}.alive.tmp")     # a writer that is still at work
    store.root.mkdir()
    outcomes = []
    for first in (None, old):                    # a new file, and one that replaces a complete one
        for k in range(1, len(events) + 2):
            target.unlink(missing_ok=True)
            if first:
                store.put(first)
            live.write_text("{")
            proc = _write_killed(target, k, payload)
            killed = k <= len(events)
            assert proc.returncode == (-9 if killed else 0), (k, proc.returncode, proc.stderr)
            on_disk = json.loads(target.read_text()) if target.exists() else None
            assert on_disk in (first, new), f"killed at event {k} ({events[k - 1]}): a partial file"
            got = store.all()                    # the reader: what is whole, nothing half; dead writers' leftovers gone
            assert got == ([on_disk] if on_disk else [])
            assert sorted(p.name for p in store.root.iterdir()) == sorted([live.name] + ([target.name] * bool(on_disk)))
            outcomes.append("new" if on_disk == new else "old" if on_disk else "none")
        assert outcomes[-1] == "new"
    assert not (store.root / QUARANTINE).exists() and "damaged" not in capsys.readouterr().err
    assert {"old", "new", "none"} <= set(outcomes)


def test_a_damaged_result_is_set_aside_named_and_read_as_unfinished(tmp_path, capsys):
    store = Store(tmp_path / "results")
    good, cut, invalid, other = (json.loads(p.read_text()) for p in sorted((REFERENCE / "results").glob("*.json")))
    for r in (good, cut, invalid, other):
        store.put(r)
    store.path(cut["run_id"]).write_bytes(store.path(cut["run_id"]).read_bytes()[:500])
    store.path(invalid["run_id"]).write_text(json.dumps({**invalid, "status": "finished"}))
    store.path(other["run_id"]).write_text(json.dumps({**other, "run_id": good["run_id"]}))   # another run's
    assert store.get(cut["run_id"]) is None
    assert store.get(good["run_id"]) == good
    assert [r["run_id"] for r in store.all()] == [good["run_id"]]
    lines = capsys.readouterr().err.splitlines()
    parked = sorted((store.root / QUARANTINE).iterdir())
    assert len(lines) == 3 and len(parked) == 3, lines
    for line, run_id, why in ((lines[0], cut["run_id"], "unterminated JSON"),
                              (lines[1], invalid["run_id"], "fails the result schema: status"),
                              (lines[2], other["run_id"], f"it holds run {good['run_id']}, not {other['run_id']}")):
        assert line.startswith(f"result {run_id} was damaged ({why}") and line.endswith("; it will run again"), line
        assert any(str(p) in line for p in parked)
    assert store.all() == [good] and not capsys.readouterr().err          # named once: it is out of the way


def test_reproduce_with_a_result_cut_short_runs_that_run_again(tmp_path):
    """The issue's case, as a user meets it: the state folder has one result cut short; the same command names
    it, sets it aside and runs it again (the numpy stub framework: a run of about a second)."""
    exps = tmp_path / "exps"
    exps.mkdir()
    (exps / "tiny.toml").write_text(TINY.replace('frameworks = ["pytorch", "tensorflow"]', 'frameworks = ["stub"]'))
    state = tmp_path / "state"
    cmd = [sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(exps), "--only", "tiny",
           "--frameworks", "stub", "--python", sys.executable, "--backend", "local", "--no-certify", "--variants", "fixed",
           "--claims",
           "none", "--state-dir", str(state), "--reports-dir", str(state / "reports"), "--data-dir",
           str(state / "data"), "--name", "t"]
    env = plugin_site.env()

    def reproduce() -> subprocess.CompletedProcess:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
        return proc

    reproduce()
    (result,) = (state / "results").glob("*.json")
    run_id = result.stem
    result.write_bytes(result.read_bytes()[:1000])           # as a crash or a full disk leaves it
    again = reproduce()
    (line,) = [x for x in again.stderr.splitlines() if "was damaged" in x]
    (parked,) = (state / "results" / QUARANTINE).iterdir()
    assert line == f"result {run_id} was damaged (unterminated JSON); moved to {parked}; it will run again"
    assert "0 already finished, 1 to run" in again.stdout and "tiny / stub / fixed r0 · ok" in again.stdout
    assert json.loads(result.read_text())["status"] == "ok" and len(parked.read_bytes()) == 1000


def test_a_damaged_certificate_cache_is_set_aside_and_made_again(tmp_path, capsys):
    folder = tmp_path / "certificates"
    cert = json.loads(next((REFERENCE).glob("certificate-*.json")).read_text())
    files.write_json_atomic(folder / "k1.json", cert)
    assert certify_runs.cached(folder, "k1") == cert
    (folder / "k1.json").write_bytes((folder / "k1.json").read_bytes()[:300])
    (folder / "k2.json").write_text(json.dumps({**cert, "status": 3}))
    assert certify_runs.cached(folder, "k1") is None and certify_runs.cached(folder, "k2") is None
    assert certify_runs.cached(folder, "k3") is None                   # none yet: nothing to say
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("certificate k1 was damaged (unterminated JSON); moved to ")
    assert lines[1].startswith("certificate k2 was damaged (its status is missing or of the wrong type); moved to ")
    assert all(x.endswith("; it will be made again") for x in lines) and len(lines) == 2
    assert sorted(p.name for p in folder.iterdir()) == [QUARANTINE]


def test_an_earlier_report_with_damaged_files_is_named_and_left_out_of_the_new_one(tmp_path, capsys):
    """A report of the same name keeps other experiments' results: a damaged one of them is named and skipped,
    and the new report is written whole (no temporary left beside it)."""
    results = Store(REFERENCE / "results").readable()[0]
    target = tmp_path / "reports" / "mine"
    cert = json.loads(next(REFERENCE.glob("certificate-*.json")).read_text())
    publish.publish(target, "mine", results, discover([BUILTIN_DIR]), None, {cert["experiment"]: [cert]})
    cut = target / "results" / f"{results[0]['run_id']}.json"
    cut.write_bytes(cut.read_bytes()[:700])
    (cert_file,) = target.glob("certificate-*.json")
    cert_file.write_text("[]")
    kept, certs = publish.earlier(target, set())
    assert sorted(r["run_id"] for r in kept) == sorted(r["run_id"] for r in results[1:]) and certs == {}
    err = capsys.readouterr().err
    assert f"{cut} is not a result this kit can read (unterminated JSON); skipped it" in err
    assert f"{cert_file} is not a certificate this kit can read" in err
    assert f"read {len(results) - 1} of {len(results)} result files" in err
    publish.publish(target, "mine", kept, discover([BUILTIN_DIR]), None, certs)
    assert not [p for p in target.rglob("*") if p.name.endswith(files.TMP_SUFFIX)]
    assert (target / "report.md").read_text().startswith("# Reproducibility report: mine")


# A publish in a process of its own, killed (SIGKILL) as it swaps the report in: at the rename that moves the old
# report aside, at the one that moves the new one in, or as it removes the old one.
PUBLISHER = textwrap.dedent("""\
    import os, signal, sys
    from pathlib import Path
    from reprokit.report import publish
    from reprokit.results.store import Store
    target, when, results = Path(sys.argv[1]), sys.argv[2], Store(Path(sys.argv[3])).readable()[0][:2]

    def hook(event, args):
        src = str(args[0]) if args else ""
        if (when, event) in (("aside", "os.rename"), ("in", "os.rename")) and src.endswith(
                {"aside": target.name, "in": ".new-" + str(os.getpid())}[when]) \
                or (when, event) == ("removed", "shutil.rmtree") and ".old-" in src:
            os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)
    publish.publish(target, "new", results, {}, None, {})
    """)


def test_a_publish_killed_while_it_swaps_the_report_in_leaves_a_whole_report(tmp_path, capsys):
    """Killed at each of its last renames (the old report moved aside, the new one moved in): the next reader
    finds a whole report, the old or the new, and nothing left beside it."""
    target = tmp_path / "reports" / "mine"
    results = Store(REFERENCE / "results").readable()[0]

    seen = []
    for when in ("aside", "in", "removed"):
        publish.publish(target, "old", results[2:], {}, None, {})
        killed = subprocess.run([sys.executable, "-c", PUBLISHER, str(target), when, str(REFERENCE / "results")],
                                cwd=REPO, capture_output=True, text=True, timeout=120,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert killed.returncode == -9, killed.stderr
        kept, _ = publish.earlier(target, set())
        title = (target / "report.md").read_text().splitlines()[0]
        assert (title, sorted(r["run_id"] for r in kept)) in [
            ("# Reproducibility report: old", sorted(r["run_id"] for r in results[2:])),
            ("# Reproducibility report: new", sorted(r["run_id"] for r in results[:2]))]
        assert sorted(p.name for p in target.parent.iterdir()) == ["mine"]
        seen.append(title.split(": ")[1])
    assert seen == ["old", "old", "new"]
    assert "put back the report" in capsys.readouterr().err

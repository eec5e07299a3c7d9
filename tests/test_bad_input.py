"""Bad input, each answered in one sentence, never a traceback, never a write outside the state and report folders:
claims files with every field mutated, result files with every field mutated (read by `compare` and by --from),
a --from folder of an older schema, and hostile names (``../``, a NUL byte, 300 characters).

The fuzzes validate in-process, where the CLI would (claims.load, compare.load, specs_from), so that every field is
tried in seconds; a few of their mutations go through the real CLI end to end."""
from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plugin_site
import pytest
from checkout import REPO
from conftest import TINY

from reprokit import cli
from reprokit.certify import certify_plan
from reprokit.claims import claims as claimlib
from reprokit.claims import verdicts
from reprokit.environments import datasets
from reprokit.errors import UserError
from reprokit.execute.from_report import specs_from
from reprokit.plan import estimate
from reprokit.plan.experiments import BUILTIN_DIR, discover
from reprokit.report import claims_section, compare, document, publish, summary_csv
from reprokit.results.provenance import code
from reprokit.results.store import Store

REFERENCE = REPO / "reports" / "quick-cpu"
SEEDS_REPORT = REPO / "reports" / "seeds-quick-cpu"
HOSTILE_TEXT = "../" + "\0" + "x" * 300
FieldPath = tuple[str | int, ...]


# --- mutations --------------------------------------------------------------------------------------

def field_paths(value: Any, at: FieldPath = (), every_item: bool = False) -> Iterator[FieldPath]:
    """The path of every field under value; of a list, its first item (a result's long series are alike) or,
    with every_item, each one."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield (*at, k)
            yield from field_paths(v, (*at, k), every_item)
    elif isinstance(value, list):
        for i, v in enumerate(value if every_item else value[:1]):
            yield (*at, i)
            yield from field_paths(v, (*at, i), every_item)


def _at(doc: Any, path: FieldPath) -> tuple[Any, str | int]:
    for part in path[:-1]:
        doc = doc[part]
    return doc, path[-1]


def other_type(value: Any) -> Any:
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, (int, float)):
        return "12"
    if isinstance(value, str):
        return 12
    if isinstance(value, list):
        return {"0": value[:1]}
    if isinstance(value, dict):
        return [value]
    return "none"


def hostile(value: Any) -> Any:
    """A value of the field's own type that no honest writer makes: a path with a NUL byte and 300 characters,
    a negative or not-a-number figure, a key that is a path."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return -1
    if isinstance(value, float):
        return math.nan
    if isinstance(value, str):
        return HOSTILE_TEXT
    if isinstance(value, list):
        return [None, HOSTILE_TEXT, -1]
    if isinstance(value, dict):
        return {**value, HOSTILE_TEXT: None}
    return {"../": "\0"}


def mutations(doc: Any) -> Iterator[tuple[str, Any]]:
    """(what, the mutated document) for each field: deleted, of another type, hostile."""
    for path in field_paths(doc):
        where = "/".join(map(str, path))
        for kind, change in (("delete", None), ("retype", other_type), ("hostile", hostile)):
            mutated = copy.deepcopy(doc)
            parent, key = _at(mutated, path)
            if change is None:
                del parent[key]
            else:
                parent[key] = change(parent[key])
            yield f"{kind} {where}", mutated


def _one_sentence(text: str) -> bool:
    return bool(text) and "\n" not in text.strip() and "Traceback" not in text


# --- result files: compare and --from ----------------------------------------------------------------

class _Runner:
    """Only what --from asks of a runner: what it would record about the environment."""
    def describe(self, framework: str) -> dict:
        return {"lock": "here.txt", "lock_sha256": "0" * 64, "image": None}


@pytest.fixture(scope="module")
def reference() -> list[dict]:
    return [r for r in Store(REFERENCE / "results").readable()[0] if r["status"] == "ok"]


@pytest.fixture(scope="module")
def here_data(tmp_path_factory, reference) -> Path:
    """The reference's data, prepared here (a generated set: the same bytes on any machine)."""
    folder = tmp_path_factory.mktemp("data")
    d = reference[0]["spec"]["data"]
    datasets.prepare({"dataset": d["dataset"], "train_samples": d["train_samples"], "test_samples": d["test_samples"],
                      "seed": reference[0]["spec"]["train"]["seed"]}, folder)
    return folder


def _read_as_compare(folder: Path, against: list[dict]) -> tuple[str, str]:
    """How `compare REFERENCE folder` takes the folder: (outcome, what it said)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            compare.render(compare.compare(against, compare.load(folder)), "A", "B")
        except UserError as exc:
            return _refusal(err.getvalue(), exc, "refused by compare")
    return _refusal(err.getvalue(), None, "accepted")


def _read_as_from(folder: Path, data: Path, history: list[dict]) -> tuple[str, str]:
    """How `reproduce --from folder` takes it, as far as a plan: its specs, their estimates and certificate pairs."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            specs = specs_from(folder, _Runner(), "cpu", data, code(), offline=True)
        except UserError as exc:
            return _refusal(err.getvalue(), exc, "refused by the spec check")
        for spec in specs:
            estimate.seconds(spec, history, None)
        pairs = [p for ps in certify_plan.pairs([s.to_dict() for s in specs]).values() for p in ps
                 if p.get("status") != "not-run"]          # as certify_runs.for_matrix takes them
        certify_plan.by_key(pairs, certify_plan.trajectory_budget("cpu", None)[0])
    return _refusal(err.getvalue(), None, "accepted")


def _read_as_report(folder: Path, experiments: dict) -> tuple[str, str]:
    """How a report of the same name takes the folder's results (publish.earlier keeps them): report.md and
    summary.csv's rows made from them."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        kept, _ = publish.earlier(folder, set())
        document.render("sent", kept, experiments)
        [summary_csv.row(r) for r in kept]
    return _refusal(err.getvalue(), None, "accepted")


def _refusal(lines: str, exc: UserError | None, otherwise: str) -> tuple[str, str]:
    """What a reader did, its every line checked to be one sentence: refused the file (and read the rest), or
    refused the folder, or went on (``otherwise``)."""
    said = lines + (f"error: {exc}\n" if exc else "")
    assert all(_one_sentence(line) for line in said.splitlines()), said
    if "is not a result this kit can read" in lines or (exc and "result files can be read" in str(exc)):
        return "refused by the reader", said
    return otherwise, said


def test_every_field_of_a_result_file_mutated_is_refused_in_one_sentence_or_read(reference, here_data, tmp_path,
                                                                                  capsys):
    """For each field path of a committed result: deleted, retyped, hostile; in a report folder beside its
    partner (the other framework's run of the same variant), read by compare (against the reference) and by
    --from. Each is refused in one sentence, the rest read, or read without fault; the counts are printed."""
    base, partner = copy.deepcopy(reference[0]), next(copy.deepcopy(r) for r in reference[1:] if
                                                    (r["experiment"], r["variant"]) ==
                                                    (reference[0]["experiment"], reference[0]["variant"]))
    for r in (base, partner):                    # as if the report was made on another machine, with this data
        r["spec"]["data"]["sha256"] = datasets.prepare(
            {k: r["spec"]["data"][k] for k in ("dataset", "train_samples", "test_samples")}
            | {"seed": r["spec"]["train"]["seed"]}, here_data).sha256
    folder = tmp_path / "sent"
    Store(folder / "results").put(partner)
    target = folder / "results" / f"{base['run_id']}.json"
    counts: dict[str, Counter[tuple[str, str]]] = {"compare": Counter(), "--from": Counter(), "report": Counter()}
    experiments = discover([BUILTIN_DIR])
    total = 0
    for what, mutated in mutations(base):
        total += 1
        target.write_text(json.dumps(mutated))
        for reader, outcome in (("compare", _read_as_compare(folder, reference)[0]),
                                ("--from", _read_as_from(folder, here_data, reference)[0]),
                                ("report", _read_as_report(folder, experiments)[0])):
            counts[reader][(what.split()[0], outcome)] += 1
        assert {p.name for p in folder.rglob("*")} == {"results", target.name, f"{partner['run_id']}.json"}, \
            f"{what}: a file was moved"
    assert total == 3 * len(list(field_paths(base))) > 600
    for c in counts.values():
        assert sum(c.values()) == total
        assert {o for _, o in c} >= {"refused by the reader", "accepted"}, c
    assert any(o == "refused by the spec check" for _, o in counts["--from"])
    with capsys.disabled():
        print(f"\n{total} mutated result files ({total // 3} field paths of {base['run_id']}.json, "
              f"{REFERENCE.relative_to(REPO)}, x delete, retype, hostile):")
        for reader, c in counts.items():
            outcomes = Counter(o for _, o in c.elements())
            print(f"  {reader}: " + ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) + "; by mutation: "
                  + "; ".join(f"{kind}: " + ", ".join(f"{n} {o}" for (k, o), n in sorted(c.items()) if k == kind)
                              for kind in ("delete", "retype", "hostile")))


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reprokit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def _folders(tmp_path: Path, state: Path) -> list[Path]:
    """What a command wrote outside its state folder (the report folder lies inside it in these tests)."""
    return sorted(p for p in tmp_path.iterdir() if p != state and not p.name.startswith("sent"))


def _refused(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, \
        proc.stderr
    return proc.stderr


def test_compare_names_a_damaged_result_skips_it_and_compares_the_rest(tmp_path):
    """Through the CLI: one result file of a report folder cut short, one of an older schema, one with a field of
    the wrong type; each named in one line, left where it is, and the rest compared."""
    sent = tmp_path / "sent"
    shutil.copytree(REFERENCE, sent)
    files = sorted((sent / "results").glob("*.json"))
    files[0].write_bytes(files[0].read_bytes()[:2000])
    older = json.loads(files[1].read_text()) | {"schema": "reprokit.result/0"}
    files[1].write_text(json.dumps(older))
    fuzzed = dict(mutations(json.loads(files[2].read_text())))["retype environment/device_name"]
    files[2].write_text(json.dumps(fuzzed))             # one of the fuzz's mutations
    before = {p: p.read_bytes() for p in sent.rglob("*") if p.is_file()}
    proc = _cli("compare", str(REFERENCE), str(sent), cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert f"compare {sent}: {files[0]} is not a result this kit can read (unterminated JSON); skipped it" in lines
    assert (f"compare {sent}: {files[1]} is not a result this kit can read (schema reprokit.result/0, and this kit "
            f"reads reprokit.result/1 and reprokit.result/2); skipped it") in lines
    assert (f"compare {sent}: {files[2]} is not a result this kit can read (fails the result schema: "
            f"environment.device_name must be str, got 12); skipped it") in lines
    assert f"compare {sent}: read {len(files) - 3} of {len(files)} result files in {sent / 'results'}" in lines
    assert "1.00x" in proc.stdout                          # the rest is compared: the same runs, ratio 1
    assert {p: p.read_bytes() for p in sent.rglob("*") if p.is_file()} == before      # evidence is not moved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sent"]                      # nothing written


def test_from_an_older_schema_says_which_it_is_and_which_this_kit_reads(tmp_path):
    sent = tmp_path / "sent"
    shutil.copytree(REFERENCE, sent)
    for path in (sent / "results").glob("*.json"):
        path.write_text(json.dumps(json.loads(path.read_text()) | {"schema": "reprokit.result/0"}))
    proc = _cli("reproduce", "--from", str(sent), "--dry-run", "--backend", "local", "--state-dir",
                str(tmp_path / "state"), "--reports-dir", str(tmp_path / "reports"), "--data-dir",
                str(tmp_path / "data"), cwd=tmp_path)
    said = _refused(proc)
    assert f"all {len(list((sent / 'results').glob('*.json')))}: schema reprokit.result/0, and this kit reads " \
           "reprokit.result/1 and reprokit.result/2" in said, said
    assert not (tmp_path / "reports").exists()


def test_from_goes_on_without_a_damaged_file(tmp_path):
    """--from a report with one file cut short: named, skipped, and the other runs planned (a dry run)."""
    sent = tmp_path / "sent"
    shutil.copytree(REFERENCE, sent)
    files = sorted((sent / "results").glob("*.json"))
    files[0].write_bytes(b"")
    proc = _cli("reproduce", "--from", str(sent), "--dry-run", "--backend", "local", "--python", sys.executable,
                "--state-dir", str(tmp_path / "state"), "--reports-dir", str(tmp_path / "reports"), "--data-dir",
                str(tmp_path / "data"), cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"--from {sent}: {files[0]} is not a result this kit can read (empty file); skipped it" in proc.stderr
    assert f"plan: {len(files) - 1} runs" in proc.stdout
    assert files[0].exists() and not (sent / "results" / "quarantine").exists()


# --- hostile names --------------------------------------------------------------------------------------

def _main(argv: list[str], capsys) -> tuple[int, str]:
    status = cli.main(argv)
    return status, capsys.readouterr().err


def _folders_args(state: Path) -> list[str]:
    """The state folder, with the reports and the data inside it: anything written elsewhere is a fault."""
    return ["--state-dir", str(state), "--reports-dir", str(state / "reports"), "--data-dir", str(state / "data")]


@pytest.mark.parametrize("name", ["../escaped", "runs/../../escaped", "/tmp/escaped", "a" * 300, "x\0y", ""])
def test_a_hostile_report_name_is_refused_before_anything_runs(name, tmp_path, capsys):
    status, err = _main(["reproduce", "--dry-run", "--backend", "local", *_folders_args(tmp_path / "state"),
                         "--name", name], capsys)
    assert status == 2 and err.startswith("error: --name ") and err.count("\n") == 1, err
    assert not list(tmp_path.iterdir())            # refused at the door: nothing planned, nothing written
    assert not Path("/tmp/escaped").exists()


def test_a_hostile_name_through_the_real_cli_is_one_sentence(tmp_path):
    """The same refusal as a user meets it, in a process of its own."""
    proc = _cli("reproduce", "--dry-run", "--backend", "local", *_folders_args(tmp_path / "state"), "--name",
                "../../escaped", cwd=tmp_path)
    assert "--name '../../escaped' has a part '..' that would climb out of its folder" in _refused(proc)
    assert not list(tmp_path.iterdir()) and not (tmp_path.parent / "escaped").exists()


def test_a_hostile_experiment_name_is_refused(tmp_path, capsys):
    """An experiment named at length (its file name must match it), one named with ../ or a NUL byte in TOML."""
    folder = tmp_path / "exps"
    folder.mkdir()
    for name, said in (("a" * 150, "150 characters long"), ("../x", "name"), ("x\\u0000y", "name")):
        for old in folder.iterdir():
            old.unlink()
        stem = "bad" if "/" in name or "\\" in name else name
        (folder / f"{stem}.toml").write_text(TINY.replace('name = "tiny"', f'name = "{name}"'))
        status, err = _main(["reproduce", "--dry-run", "--backend", "local", "--experiments", str(folder),
                             *_folders_args(tmp_path / "state")], capsys)
        assert status == 2 and err.startswith("error: ") and err.count("\n") == 1 and said in err, err
    assert _folders(tmp_path, tmp_path / "state") == [folder]


def test_a_hostile_run_id_in_a_result_file_is_refused_by_compare_and_from(reference, here_data, tmp_path):
    for run_id in ("../../escaped", "a" * 300, "00\0"):
        folder = tmp_path / "sent"
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "results").mkdir(parents=True)
        bad = copy.deepcopy(reference[0]) | {"run_id": run_id}
        (folder / "results" / f"{reference[0]['run_id']}.json").write_text(json.dumps(bad))
        outcome, said = _read_as_compare(folder, reference)
        assert outcome == "refused by the reader" and "run_id" in said, said
        outcome, said = _read_as_from(folder, here_data, reference)
        assert outcome == "refused by the reader" and "run_id" in said, said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sent"]


# --- claims files --------------------------------------------------------------------------------------

def toml_text(doc: dict[str, Any]) -> str:
    """A claims document as TOML (the standard library reads TOML but writes none): scalars, then [[claim]]."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float) and not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)                 # JSON's escapes are TOML basic strings'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
        raise TypeError(v)
    tables = {k: v for k, v in doc.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)}
    out = [f"{json.dumps(k)} = {value(v)}" for k, v in doc.items() if k not in tables]
    for key, items in tables.items():
        for item in items:
            out += [f"\n[[{key}]]", *(f"{json.dumps(k)} = {value(v)}" for k, v in item.items())]
    return "\n".join(out) + "\n"


def claims_mutations(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each claim alone in a file (top-level keys kept), and each of its fields (and the top level's) deleted,
    retyped, out of range (a negative or not-a-number figure, an unknown name, an empty list), and an unknown
    key beside it."""
    def out_of_range(v: Any) -> Any:
        if isinstance(v, bool):
            return 2
        if isinstance(v, (int, float)):
            return -1e308 if v >= 0 else math.nan
        if isinstance(v, str):
            return "no_such_" + v[:20]
        if isinstance(v, list):
            return []
        return {}

    top = {k: v for k, v in doc.items() if k != "claim"}
    for i, claim in enumerate(doc["claim"]):
        one = {**copy.deepcopy(top), "claim": [copy.deepcopy(claim)]}
        paths = [p for p in field_paths(one, every_item=True) if p != ("claim",) and p != ("claim", 0)]
        if i:
            paths = [p for p in paths if p[0] == "claim"]         # the top level is fuzzed once
        parents = set()
        for path in paths:
            where = f"claim {claim['id']}: " + "/".join(map(str, path[2:] if path[0] == "claim" else path))
            for kind, change in (("delete", None), ("retype", other_type), ("out of range", out_of_range)):
                mutated = copy.deepcopy(one)
                parent, key = _at(mutated, path)
                if change is None:
                    del parent[key]
                else:
                    parent[key] = change(parent[key])
                yield f"{kind} {where}", mutated
            parent_path = path[:-1]
            if parent_path not in parents and isinstance(_at(one, path)[0], dict):
                parents.add(parent_path)
                mutated = copy.deepcopy(one)
                _at(mutated, path)[0]["unknown_key"] = 1
                yield f"unknown key beside {where}", mutated


def test_every_field_of_the_seeds_claims_mutated_is_refused_in_one_sentence_or_judged(tmp_path, capsys):
    """claims/seeds.toml, field by field: a mutation is refused in one sentence naming the file, or the claims
    load, check against the experiments and are judged on a committed report's results without fault."""
    doc = tomllib.loads((REPO / "claims" / "seeds.toml").read_text())
    assert tomllib.loads(toml_text(doc)) == doc                        # the writer writes what it read
    experiments = discover([BUILTIN_DIR])
    results = Store(SEEDS_REPORT / "results").readable()[0]
    path = tmp_path / "mutated.toml"
    counts: Counter[str] = Counter()
    for what, mutated in claims_mutations(doc):
        path.write_text(toml_text(mutated))
        try:
            loaded = claimlib.load(path)
            claimlib.check_against(loaded, experiments)
        except UserError as exc:
            assert _one_sentence(str(exc)) and str(exc).startswith(str(path)), f"{what}: {exc}"
            counts["refused in one sentence"] += 1
            continue
        found = verdicts.evaluate(loaded, results)
        claims_section.overview(found) + claims_section.details(found)
        counts["accepted and judged (the field is optional or its value allowed)"] += 1
    assert counts["refused in one sentence"] > 0
    with capsys.disabled():
        print(f"\n{sum(counts.values())} mutated claims files (claims/seeds.toml, {len(doc['claim'])} claims): "
              + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))


def test_a_mutated_claims_file_through_the_cli_is_one_sentence(tmp_path):
    """A few of the fuzz's mutations as a user meets them: --claims FILE on a dry run."""
    doc = tomllib.loads((REPO / "claims" / "seeds.toml").read_text())
    picked = dict(m for m in claims_mutations(doc) if m[0] in {
        "delete claim s000-pytorch-total-time: metric/kind", "unknown key beside claim s000-pytorch-total-time: id"})
    assert len(picked) == 2
    for what, mutated in picked.items():
        path = tmp_path / "claims.toml"
        path.write_text(toml_text(mutated))
        proc = _cli("reproduce", "--dry-run", "--backend", "local", "--claims", str(path), "--state-dir",
                    str(tmp_path / "state"), "--reports-dir", str(tmp_path / "reports"), "--data-dir",
                    str(tmp_path / "data"), "--dataset", "learnable", cwd=tmp_path)
        assert str(path) in _refused(proc), what
    assert not (tmp_path / "reports").exists()


def _custom_tiny(folder: Path, builders: dict[str, str]) -> None:
    start, end = TINY.index("[model]"), TINY.index("[data]")
    lines = "".join(f'{fw} = "my_models:{ref}"\n' for fw, ref in builders.items())
    (folder / "tiny.toml").write_text(TINY[:start] + '[model]\nname = "custom"\nnum_classes = 10\n'
                                      'width_multiplier = 1.0\n' + lines + '\n' + TINY[end:])


def test_a_framework_asked_for_without_a_builder_is_one_sentence(tmp_path, capsys):
    """--frameworks may add a framework to an experiment, but not to a custom model that gives it no builder."""
    folder = tmp_path / "exps"
    folder.mkdir()
    _custom_tiny(folder, {"pytorch": "torch_model", "tensorflow": "keras_model"})
    status, err = _main(["reproduce", "--dry-run", "--backend", "local", "--experiments", str(folder), "--only",
                         "tiny", "--frameworks", "pytorch,jax", *_folders_args(tmp_path / "state")], capsys)
    assert status == 2 and err.count("\n") == 1, err
    assert ("experiment 'tiny' has a custom model with no JAX builder (it gives PyTorch, TensorFlow); add "
            'model.jax = "module:function" or leave jax out of --frameworks') in err
    _custom_tiny(folder, {"pytorch": "torch_model"})      # and the experiment's own frameworks need theirs
    status, err = _main(["reproduce", "--dry-run", "--backend", "local", "--experiments", str(folder),
                         *_folders_args(tmp_path / "state")], capsys)
    assert status == 2 and "model.tensorflow: missing; a custom model names a builder" in err, err
    # one the JAX kit's limits name (reprokit/kits/jax_kit/limits.py): bf16 compute it cannot impose on a user's module
    _custom_tiny(folder, {"pytorch": "torch_model", "tensorflow": "keras_model", "jax": "flax_model"})
    (folder / "tiny.toml").write_text((folder / "tiny.toml").read_text().replace('"fp32"', '"bf16_mixed"'))
    status, err = _main(["reproduce", "--dry-run", "--backend", "local", "--experiments", str(folder), "--only",
                         "tiny", "--frameworks", "pytorch,jax", *_folders_args(tmp_path / "state")], capsys)
    assert status == 2 and err.count("\n") == 1, err
    assert "numerics.precision: bf16_mixed with model.name custom cannot run in JAX: " in err
    assert err.endswith("(the JAX kit's limits, variant fixed); change it, or leave jax out of --frameworks\n")
    # a built-in model the JAX kit lacks
    status, err = _main(["reproduce", "--dry-run", "--backend", "local", "--only", "resnet50_imagenet_speed",
                         "--frameworks", "pytorch,jax", *_folders_args(tmp_path / "state")], capsys)
    assert status == 2 and err.count("\n") == 1, err
    assert "model.name: resnet50 cannot run in JAX: the JAX kit has no built-in ResNet-50 yet" in err


LIMITED = '''\
from reprokit.kits.contract.names import Framework

FRAMEWORK = Framework("limited", "Limited", "limited_kit", "#CC79A7", parts=("backend",))
'''


def test_a_spec_option_a_kit_declares_it_cannot_honour_is_one_sentence(tmp_path):
    """A kit's limits module (data, no framework import) is read by the host for any registered framework."""
    (tmp_path / "limited_kit").mkdir()
    (tmp_path / "limited_kit" / "__init__.py").write_text("")
    (tmp_path / "limited_kit" / "limits.py").write_text(
        "def refusals(spec):\n"
        "    inter = spec['numerics']['cpu_threads']['inter_op']\n"
        "    return [f'numerics.cpu_threads.inter_op = {inter}: it has no inter-op pool'] if inter == 1 else []\n")
    (tmp_path / "limited_entry.py").write_text(LIMITED)
    plugin_site.register(tmp_path, "limited", {"limited": "limited_entry:FRAMEWORK"})
    folder = tmp_path / "exps"
    folder.mkdir()
    (folder / "tiny.toml").write_text(TINY)
    proc = subprocess.run(
        [sys.executable, "-m", "reprokit", "reproduce", "--dry-run", "--backend", "local", "--experiments",
         str(folder), "--only", "tiny", "--frameworks", "pytorch,limited", "--python", sys.executable,
         *_folders_args(tmp_path / "state")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": f"{REPO}:{tmp_path}"})
    assert ("tiny.toml: numerics.cpu_threads.inter_op = 1: it has no inter-op pool (the Limited kit's limits, "
            "variant fixed); change it, or leave limited out of --frameworks") in _refused(proc)

"""Certificates are shared by content across state folders through the per-user cache (reprokit/certify/
certify_runs.py): a second state folder of the same matrix copies the one the first made, runs no framework
process for it and says so; a changed spec or changed certificate code is another key, made anew; only
verdicts are shared, never an error of one attempt. The real kits make the first one, with a line per job."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import tiny_specs

from reprokit.certify import certify_plan, certify_runs
from reprokit.environments import cache
from reprokit.environments.envs import ENVS
from reprokit.runners.local import LocalRunner

BUDGET = certify_plan.trajectory_budget("cpu", None)


def _matrix(tiny_dir: Path, data_dir: Path, lr: float | None = None) -> list[dict]:
    def edit(spec: dict) -> None:
        if lr is not None:
            spec["train"]["optimizer"]["lr"] = lr
    return list(tiny_specs(tiny_dir, data_dir, edit=edit).values())


def _same(a: dict, b: dict) -> bool:
    """Equal as the JSON they are stored as (a NaN among the numbers is not equal to itself)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _no_kits(data_dir: Path) -> LocalRunner:
    """A runner whose every framework process fails at once: a certificate it makes is an error."""
    return LocalRunner(ENVS, data_dir, "cpu", python=Path("/bin/false"))


@pytest.mark.slow
def test_a_second_state_folder_reuses_the_certificate_and_a_changed_spec_makes_a_new_one(
        kit_python, tiny_dir, data_dir, tmp_path, monkeypatch, capsys):
    for fw in ("pytorch", "tensorflow"):
        kit_python(fw)                                    # the kits' environments, built once for the suite
    monkeypatch.setenv("REPROKIT_CACHE", str(tmp_path / "user-cache"))      # this test's own, not the user's
    shared = cache.root() / "certificates"
    specs = _matrix(tiny_dir, data_dir)
    key = certify_plan.cache_key({s["framework"]: s for s in specs}, BUDGET[0])

    first = certify_runs.for_matrix(specs, LocalRunner(ENVS, data_dir, "cpu"), tmp_path / "a", True, *BUDGET)
    made = first["tiny"][0]
    assert made["status"] == "pass", made["summary"]
    assert made["setup"]["steps"] == certify_plan.CPU_STEPS               # the matrix's size on a CPU
    assert _same(json.loads((shared / f"{key}.json").read_text()), made)
    assert _same(json.loads((tmp_path / "a" / "certificates" / f"{key}.json").read_text()), made)
    out = capsys.readouterr().out
    # each side names its jobs as they end, with their seconds and how many are left
    assert re.search(r"certificate side 1/2 \(PyTorch\): tiny fixed / fixed: done in \d+ s; 0 job\(s\) left", out), out
    assert re.search(r"certificate side 2/2 \(TensorFlow\): tiny fixed / fixed: done in \d+ s; 0 job\(s\) left", out)

    # Another state folder, the same matrix: copied from the cache; a framework process would have failed.
    second = certify_runs.for_matrix(specs, _no_kits(data_dir), tmp_path / "b", True, *BUDGET)
    assert _same(second["tiny"][0], made)
    assert _same(json.loads((tmp_path / "b" / "certificates" / f"{key}.json").read_text()), made)
    assert not (tmp_path / "b" / "work").exists()                           # no certificate work at all
    assert f"certificate: tiny fixed / fixed: pass, from the cache ({shared / f'{key}.json'})" in \
        capsys.readouterr().out

    # A changed spec is another certificate: made anew (here by kits that fail, so an error), and not shared.
    changed = _matrix(tiny_dir, data_dir, lr=0.01)
    other = certify_plan.cache_key({s["framework"]: s for s in changed}, BUDGET[0])
    assert other != key
    third = certify_runs.for_matrix(changed, _no_kits(data_dir), tmp_path / "b", True, *BUDGET)
    assert third["tiny"][0]["status"] == "error" and (tmp_path / "b" / "work" / f"cert-{other}").is_dir()
    assert not (shared / f"{other}.json").exists()
    assert sorted(p.name for p in shared.glob("*.json")) == [f"{key}.json"]


def test_the_key_holds_what_a_certificate_depends_on_and_not_the_commit(tiny_dir, data_dir):
    """The spec's certified parts, the lock, the kits' code and the data checksum change the key; the commit
    and whether the tree is dirty do not (the content of the code stands for them)."""
    pair = {s["framework"]: s for s in _matrix(tiny_dir, data_dir)}
    key = certify_plan.cache_key(pair, BUDGET[0])

    def changed(edit) -> str:
        other = json.loads(json.dumps(pair))
        edit(other["tensorflow"])
        return certify_plan.cache_key(other, BUDGET[0])

    assert changed(lambda s: s["provenance"].update(code_commit="f" * 40, code_dirty=True)) == key
    assert changed(lambda s: s["train"].update(epochs=99)) == key                # how long it is timed: not certified
    for edit in (lambda s: s["provenance"].update(lock_sha256="0" * 64),
                 lambda s: s["provenance"].update(code_sha256="0" * 64),
                 lambda s: s["provenance"].update(image="reprokit-tensorflow:other"),
                 lambda s: s["data"].update(sha256="0" * 64),
                 lambda s: s["model"].update(width_multiplier=0.25),
                 lambda s: s["train"]["optimizer"].update(momentum=0.95)):
        assert changed(edit) != key
    assert certify_plan.cache_key(pair, BUDGET[0] / 2) != key
    # the steps a matrix runs: a GPU's ten are not a CPU's
    on_gpu = json.loads(json.dumps(pair))
    for spec in on_gpu.values():
        spec["device"] = "gpu"
    assert certify_plan.matrix_steps("gpu") != certify_plan.matrix_steps("cpu")
    assert certify_plan.cache_key(on_gpu, BUDGET[0]) != key


def test_an_error_is_not_shared_and_a_damaged_shared_one_is_made_again(tiny_dir, data_dir, tmp_path, capsys):
    shared = tmp_path / "shared"
    specs = _matrix(tiny_dir, data_dir)
    key = certify_plan.cache_key({s["framework"]: s for s in specs}, BUDGET[0])
    shared.mkdir()
    (shared / f"{key}.json").write_text("{")                                   # a writer cut off
    found = certify_runs.for_matrix(specs, _no_kits(data_dir), tmp_path / "a", True, *BUDGET, shared)
    assert found["tiny"][0]["status"] == "error"
    assert f"certificate {key} was damaged" in capsys.readouterr().err
    assert not (shared / f"{key}.json").exists()                                # set aside, the error not shared
    assert (tmp_path / "a" / "certificates" / f"{key}.json").exists()           # the state folder keeps its own

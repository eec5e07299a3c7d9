"""Cached files of the data folder damaged between two real runs (the numpy stub kit of tests/stub_plugin on the tiny
experiment, about a second of training): the next command sets them aside or rebuilds them, and its run is made."""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import stub_matrix as sm

from reprokit.kits.framework_free import cpu_peak

DATASET = "learnable-n256-t64-s0.npz"           # what the tiny experiment's data step prepares


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> tuple[Path, dict]:
    """The data folder one real run prepared and wrote its CPU peak into, and that run's result."""
    root = tmp_path_factory.mktemp("gaps")
    proc = reproduce(root, "first")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return root, only_result(root, "first")


def reproduce(root: Path, state: str) -> subprocess.CompletedProcess[str]:
    return sm.run(sm.command(root, sm.experiment(root / "exp"), root / state, repeats=1))


def only_result(root: Path, state: str) -> dict:
    [path] = (root / state / "results").glob("*.json")
    result: dict = json.loads(path.read_text())
    return result


def test_a_cut_short_prepared_dataset_is_set_aside_and_prepared_again(first):
    root, before = first
    path = root / "data" / DATASET
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])                     # as a crash or a full disk leaves it
    proc = reproduce(root, "after-cut")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith(f"dataset {DATASET} was damaged")]
    assert "(not a readable .npz: File is not a zip file); moved to " in line
    assert line.endswith("; it will be prepared again")
    [kept] = (root / "data" / "quarantine").glob(f"{DATASET}.*")
    assert kept.read_bytes() == whole[: len(whole) // 2]
    # prepared again from its seed: the same bytes, which the new run read
    assert path.read_bytes() == whole
    after = only_result(root, "after-cut")
    assert after["status"] == "ok"
    assert after["provenance"]["data_sha256"] == before["provenance"]["data_sha256"] == hashlib.sha256(
        whole).hexdigest()


def test_a_cpu_peak_cache_entry_without_its_figure_is_measured_again_and_rewritten(first):
    root, before = first
    cache = root / "data" / cpu_peak.CACHE_NAME
    key = before["environment"]["matmul_peak_key"]
    assert key in json.loads(cache.read_text())                    # the first run wrote it
    cache.write_text(json.dumps({key: {"run_id": before["run_id"]}, "other": [1]}))
    proc = reproduce(root, "after-cache")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    after = only_result(root, "after-cache")
    env = after["environment"]
    assert after["status"] == "ok" and env["matmul_peak_source"] == cpu_peak.MEASURED
    # rewritten by the host with this run's figure, the bad entries left out
    assert json.loads(cache.read_text()) == {key: {"flops": env["matmul_peak_flops"], "run_id": after["run_id"]}}


@pytest.mark.parametrize("entry", ["[1, 2]", '{KEY: {"flops": "fast", "run_id": "r"}}', '{KEY: {"flops": 1e9}}',
                                   '{KEY: ', "null"])
def test_a_damaged_cpu_peak_cache_reads_as_absent(tmp_path, entry):
    env = {"framework": "stub", "framework_version": "1", "cpu_threads": {"intra_op": 1, "inter_op": 1}}
    (tmp_path / cpu_peak.CACHE_NAME).write_text(entry.replace("KEY", json.dumps(cpu_peak.key(env))))
    got = cpu_peak.for_run(env, tmp_path, lambda: 2.0e9)
    assert got["matmul_peak_flops"] == 2.0e9 and got["matmul_peak_source"] == cpu_peak.MEASURED

"""One run per GPU slot on one host: the scheduler, the pinning, the co-load records and the bad input.

This machine has no GPU, so the scheduler runs on fake GPU slots (REPROKIT_FAKE_GPU_SLOTS, the
test-only switch: each slot a share of the CPUs). The topology of a real GPU host is read from a
stand-in nvidia-smi that prints what the real one prints.
"""
from __future__ import annotations

import io
import json
import multiprocessing
import os
import subprocess
import sys

import pytest
from checkout import REPO
from gpu_host import TOPO

from reprokit import cli
from reprokit.console import RunProgress
from reprokit.environments import host_checks, topology
from reprokit.errors import UserError
from reprokit.execute import data_step, schedule
from reprokit.plan.experiments import load
from reprokit.plan.plan import Options, specs_for
from reprokit.report import pair_findings
from reprokit.results import results
from reprokit.results.provenance import code
from reprokit.results.store import Store
from reprokit.runners.base import KitCall
from reprokit.runners.docker import DockerRunner


@pytest.fixture
def gpu_host(stand_in_gpu_host):
    """A stand-in nvidia-smi on PATH for a host with four GPUs, two per NUMA node."""
    stand_in_gpu_host()


def test_topology_gives_each_gpu_its_own_cores_near_it(gpu_host, monkeypatch):
    monkeypatch.setattr(topology, "usable_cpus", lambda: {0, 1, 2, 3})
    assert topology.parse_topo(TOPO)["2"] == ({2, 3}, "1")
    slots = topology.gpu_slots(host_checks.resolve_gpus("all"))
    assert [(s.gpu, s.cpus, s.mems) for s in slots] == [("0", "0", "0"), ("1", "1", "0"), ("2", "2", "1"),
                                                        ("3", "3", "1")]
    assert slots[3].device_id == "GPU-3aaaaaaa-0000-0000-0000-000000000003"
    # Two GPUs of one NUMA node assigned: the node's cores are split between them, none shared.
    two = topology.gpu_slots(host_checks.resolve_gpus("2,GPU-3aaaaaaa-0000-0000-0000-000000000003"))
    assert [(s.gpu, s.cpus) for s in two] == [("2", "2"), ("3", "3")]
    assert topology.format_cpulist({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"


def test_both_runners_apply_a_placement(tmp_path):
    slot = topology.Placement("3", "GPU-3aaaaaaa-0000-0000-0000-000000000003", "24-35", "1")
    call = KitCall("pytorch", "reprokit.kits.run", ("--out", tmp_path / "out" / "r.json"), output=tmp_path / "out",
                   placement=slot)
    runner = DockerRunner(REPO, tmp_path, "all", pinned_images={"pytorch": "reprokit/pytorch:test"})
    config = runner.container_config(call, "label")
    assert config["cpuset_cpus"] == "24-35" and config["cpuset_mems"] == "1"
    (request,) = config["device_requests"]
    assert request["DeviceIDs"] == [slot.gpu_uuid] and request["Capabilities"] == [["gpu"]]


@pytest.mark.parametrize("argv, fake, fragment", [
    (["--parallel", "3"], "2", "--parallel 3 is more than the 2 GPU(s) assigned"),
    (["--parallel", "2"], None, "--parallel 2 runs one run per GPU, and no GPU is assigned"),
    (["--parallel", "many"], "2", "--parallel 'many' is not understood"),
    (["--parallel", "2", "--gpus", "0,7"], "gpu-host", "GPU id 7 is not on this host (it has 0, 1, 2, 3)"),
    (["--parallel", "5", "--gpus", "all"], "gpu-host", "--parallel 5 is more than the 4 GPU(s) assigned"),
])
def test_bad_parallel_input_is_one_sentence_before_any_run(argv, fake, fragment, tiny_dir, tmp_path, monkeypatch,
                                                           capsys, request):
    if fake == "gpu-host":
        request.getfixturevalue("gpu_host")
    elif fake:
        monkeypatch.setenv(topology.FAKE_SLOTS_ENV, fake)
    else:
        monkeypatch.delenv(topology.FAKE_SLOTS_ENV, raising=False)
    code = cli.main(["reproduce", "--experiments", str(tiny_dir), "--only", "tiny", "--backend", "local",
                     "--state-dir", str(tmp_path / "state"), "--data-dir", str(tmp_path / "data"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error: ") == 1 and fragment in err, err
    assert not (tmp_path / "state" / "results").exists()


@pytest.mark.slow
def test_two_runs_at_once_each_pinned_to_its_slot_and_recorded(kit_python, tiny_dir, tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two slots need two CPUs")
    kit_python("pytorch"), kit_python("tensorflow")
    # "auto" threads are resolved in the kit, on the CPUs of its slot, not on the planning host
    toml = tiny_dir / "tiny.toml"
    toml.write_text(toml.read_text().replace("intra_op = 1,", 'intra_op = "auto",'))
    proc = subprocess.run(
        [sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(tiny_dir), "--only", "tiny",
         "--backend", "local", "--parallel", "auto", "--no-certify", "--variants", "fixed",
         "--state-dir", str(tmp_path / "state"),
         "--reports-dir", str(tmp_path / "reports"), "--data-dir", str(tmp_path / "data"), "--name", "t"],
        cwd=REPO, env={**os.environ, topology.FAKE_SLOTS_ENV: "2"}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 runs at once, one per fake (test-only) GPU slot" in proc.stdout
    runs = {r["framework"]: r for r in (json.loads(p.read_text())
                                        for p in (tmp_path / "state" / "results").glob("*.json"))}
    assert set(runs) == {"pytorch", "tensorflow"}
    pt, tf = runs["pytorch"], runs["tensorflow"]
    for me, other in ((pt, tf), (tf, pt)):
        assert results.problems(me) is None and me["status"] == "ok"
        placement = me["launcher"]["placement"]
        assert placement["fake"] is True and placement["gpu"] is None
        # the kit saw one usable CPU: the one of its slot; it resolved "auto" to it and recorded both
        assert me["environment"]["host"]["usable_cpus"] == len(topology.parse_cpulist(placement["cpus"])) == 1
        assert me["spec"]["numerics"]["cpu_threads"]["intra_op"] == "auto"
        assert me["environment"]["cpu_threads"]["intra_op"] == 1
        (beside,) = me["launcher"]["co_load"]
        assert beside["run_id"] == other["run_id"] and beside["slot"] == other["launcher"]["placement"]["gpu_uuid"]
        assert beside["overlap_s"] > 0
    assert pt["launcher"]["placement"]["cpus"] != tf["launcher"]["placement"]["cpus"]
    # Same co-load on both sides: no finding. One side alone: the report's ratio is flagged.
    assert pair_findings.co_load([pt], [tf]) == []
    alone = {**tf, "launcher": {**tf["launcher"], "co_load": []}}
    (finding,) = pair_findings.co_load([pt], [alone])
    assert finding["code"] == "ratio-across-co-load" and "PyTorch 1, TensorFlow 0" in finding["message"]
    assert "ratio-across-co-load" not in (tmp_path / "reports" / "t" / "report.md").read_text()


def test_a_slots_one_sentence_error_reaches_the_command_as_that_sentence(tiny_dir, data_dir, tmp_path, monkeypatch):
    """A runner's UserError in a slot's own process (here the Docker runner finding no engine where the command's
    engine was: DOCKER_HOST names a socket nobody serves) stops the other slots and comes back as its sentence."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv(topology.FAKE_SLOTS_ENV, "2")
    opts = Options(profile="quick", device="cpu", repeats=3, frameworks=("pytorch",),
                   data=data_step.Preparing(data_dir, allow_download=False))
    todo = list(specs_for(load(tiny_dir / "tiny.toml"), opts,
                          lambda fw: {"lock": None, "lock_sha256": None, "image": None}, code()))
    runner = DockerRunner(REPO, data_dir, "none", pinned_images={"pytorch": "reprokit/pytorch:test"})
    store = Store(tmp_path / "state" / "results")
    with pytest.raises(UserError) as raised:
        schedule.run_all(runner, todo, topology.fake_slots() or [], tmp_path / "work", tmp_path / "ledger", store,
                         lambda i, spec: RunProgress(f"run {i}", stream=io.StringIO()))
    assert str(raised.value).startswith("no Docker engine answers (no Docker socket here); start it")
    assert not multiprocessing.active_children() and not store.root.exists()

"""What a run leaves behind when the orchestrator itself dies (`kill -9`), or when a framework writes temporary files.

Faults from outside: SIGKILL to the real pid of a real `reprokit reproduce` (local runner) or of a real process
running a Docker run; processes listed from /proc, containers from the engine, files from the disk.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import docker.errors
import pytest
import stub_matrix as sm
import test_docker_runner as tdr
from conftest import tiny_specs
from test_docker_runner import REPO, make_spec, probe_call

from reprokit.environments import topology
from reprokit.environments.envs import ENVS
from reprokit.kits.contract.spec import typed
from reprokit.runners import base, owners
from reprokit.runners import docker as dr
from reprokit.runners.local import LocalRunner

# test_docker_runner.py's fixtures, as they are: the engine, the stand-in kit and its image
client, test_base, probe_lock, probe_kits, dirs, make_runner = (
    tdr.client, tdr.test_base, tdr.probe_lock, tdr.probe_kits, tdr.dirs, tdr.make_runner)

GONE_WITHIN_S = 2
ORPHAN_PREFIX = "0a7f"        # run ids of this module's containers (not test_docker_runner's, whose leftovers it checks)

pytestmark = pytest.mark.alone


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if not sm.gone(p)]


@pytest.mark.parametrize("parallel", [False, True], ids=["one-slot", "parallel"])
def test_a_killed_orchestrator_takes_its_local_kit_process_with_it(tmp_path, kit_python, parallel):
    """Killed at once as the TensorFlow kit starts: the kit, which writes nothing for its first seconds (imports,
    the model's build), would go on without its orchestrator until its first line found the pipe broken. With
    --parallel the kit's parent is a slot's process, which must die with the orchestrator too."""
    exp = sm.experiment(tmp_path / "exp", epochs=200, frameworks='"tensorflow"')
    state = tmp_path / "state"
    extra = ("--parallel", "2") if parallel else ()
    cmd = sm.command(tmp_path, exp, state, *extra, repeats=2 if parallel else 1, frameworks="tensorflow",
                     python=kit_python("tensorflow"))
    log = tmp_path / "out.log"
    proc = sm.start(cmd, log, **({topology.FAKE_SLOTS_ENV: "2"} if parallel else {}))
    kits: list[int] = []
    try:
        sm.wait_for(lambda: sm.kit_processes(state) or proc.poll() is not None, timeout=90, every=0.02)
        assert proc.poll() is None, f"the command ended before its kit started: {log.read_text()[-2000:]}"
        kits = list(sm.kit_processes(state))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + GONE_WITHIN_S
        while _alive(kits) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = _alive(kits)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _alive(kits):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert not left, f"kit process(es) {left} train on, {GONE_WITHIN_S} s after their orchestrator was killed"


def test_a_local_tensorflow_run_leaves_nothing_in_tmp(tmp_path, tiny_dir, data_dir, monkeypatch):
    """TensorFlow's autograph writes a module per traced function to the temporary folder; multiprocessing its
    folders. Each goes to the kit process's own folder, removed after the run: neither the orchestrator's TMPDIR
    nor /tmp gets a file."""
    own_tmp = tmp_path / "orchestrator-tmp"
    own_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(own_tmp))          # what the kit would inherit without a folder of its own
    before = set(os.listdir("/tmp"))
    spec = typed(tiny_specs(tiny_dir, data_dir)["tensorflow"])
    work = tmp_path / "work"
    result = base.run_spec(LocalRunner(ENVS, data_dir, "cpu"), spec, work, lambda event: None)
    assert result is not None and result["status"] == "ok", result and result["failure"]
    assert not list(own_tmp.iterdir()), f"the kit wrote to its orchestrator's TMPDIR: {list(own_tmp.iterdir())}"
    autograph = {e for e in set(os.listdir("/tmp")) - before if e.startswith(("__autograph_generated", "pymp-"))}
    assert not autograph, f"the run left files in /tmp: {autograph}"
    assert sorted(p.name for p in (work / spec.run_id).iterdir()) == ["out", "spec.json"], "a temp folder stayed"


# ---------------------------------------------------------------------------
# Docker: the containers of a command killed with kill -9

# Runs one call through an unpickled DockerRunner, as an orchestrator does, until it is killed.
RUN_ONE = "import pickle, sys; runner, call = pickle.load(sys.stdin.buffer); runner.run(call, lambda event: None)"


def _running(client, run_id: str, timeout: float = 60):
    return sm.wait_for(lambda: client.containers.list(filters={"label": f"{dr.LABEL_RUN}={run_id}",
                                                               "status": "running"}), timeout=timeout)[0]


def _start_owner(runner: dr.DockerRunner, tmp_path: Path, client) -> tuple[subprocess.Popen[bytes], str]:
    """A process that runs a sleeping probe in a container; (the process, the container's name) once it runs."""
    spec, spec_path = make_spec(tmp_path, {"sleep": 300}, run_id=ORPHAN_PREFIX + uuid.uuid4().hex[:12])
    proc = subprocess.Popen([sys.executable, "-c", RUN_ONE], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdin is not None
    proc.stdin.write(pickle.dumps((runner, probe_call(runner, spec, spec_path))))
    proc.stdin.close()
    return proc, _running(client, spec["run_id"]).name


def _forged(client, owner: dict[str, str], command: list[str]) -> str:
    """A container labelled as a run's, with an owner no real command of this test can be: a pid that another
    process has since, a process of another host."""
    name = f"reprokit-{ORPHAN_PREFIX}{uuid.uuid4().hex[:12]}"
    container = client.containers.run(tdr.TEST_BASE, command, name=name, detach=True, network_mode="none",
                                      labels={dr.LABEL: "1", dr.LABEL_RUN: name[len("reprokit-"):], **owner})
    if command == ["true"]:
        container.wait(timeout=60)
    return name


@pytest.mark.docker
def test_prepare_removes_the_containers_of_gone_owners_and_keeps_the_others(make_runner, tmp_path, client):
    runner = make_runner()
    owners_procs: list[subprocess.Popen[bytes]] = []
    names: list[str] = []
    try:
        for _ in range(2):
            proc, name = _start_owner(runner, tmp_path, client)
            owners_procs.append(proc)
            names.append(name)
        (killed, _), (orphan, kept) = owners_procs, names
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(10)
        assert client.containers.get(orphan).status == "running", "the killed command's container trains on"
        # An owner whose pid now names another process (this test's), which started at another time.
        earlier = subprocess.Popen(["sleep", "60"])
        reused = {**owners.labels(), owners.LABEL_STARTED: owners.started(earlier.pid) or ""}
        earlier.kill()
        earlier.wait()
        names.append(exited := _forged(client, reused, ["true"]))
        names.append(elsewhere := _forged(client, {**owners.labels(), owners.LABEL_HOST: f"not-{socket.gethostname()}",
                                                   owners.LABEL_PID: str(earlier.pid)}, ["sleep", "300"]))
        lines: list[str] = []
        runner.prepare({"tensorflow"}, log=lines.append)
        left = {c.name for c in client.containers.list(all=True, filters={"label": dr.LABEL})}
        assert orphan not in left and exited not in left
        assert kept in left and elsewhere in left, "a live command's or another host's container was removed"
        removed = [line for line in lines if "whose command is gone" in line]
        assert len(removed) == 1 and orphan in removed[0] and exited in removed[0], lines
        assert f"pid {killed.pid} on {socket.gethostname()}, running" in removed[0]
        assert kept not in removed[0] and elsewhere not in removed[0]
    finally:
        for proc in owners_procs:
            proc.kill()
            proc.wait()
        for name in names:
            with contextlib.suppress(docker.errors.NotFound):
                client.containers.get(name).remove(force=True)

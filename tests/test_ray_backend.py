"""--backend ray against a real Ray cluster on this machine: a head and two worker nodes, loopback only.

One cluster serves the whole module (tests/ray_cluster.py). Node n1 uses the
machine's Docker engine, node n2 (where an engine answers) one of its own,
with its own data root and socket, so that loading the image and staging the
data on a node are real. The runs are the tiny experiment on the CPU, one run
per node at a time (each node has one fake GPU slot, the test-only switch).
Skipped with the reason where Ray is not installed (`pip install .[ray]`;
`nox -s tests` installs it).
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import ray_cluster  # sets Ray's environment before Ray is imported

pytest.importorskip("ray", reason="Ray is not installed here (pip install '.[ray]'); nox -s tests installs it")
from checkout import REPO  # noqa: E402

from reprokit.environments import host_checks  # noqa: E402
from reprokit.environments.topology import FAKE_SLOTS_ENV  # noqa: E402
from reprokit.kits.contract.spec import RunSpec  # noqa: E402
from reprokit.results import results  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.alone]
TEST_BASE = os.environ.get("REPROKIT_TEST_BASE_IMAGE", "reprokit/test-base:bookworm-py311")


def _engine() -> str | None:
    """Why no node can have an engine of its own here, or None when one can."""
    ok, why = host_checks.engine_status()
    if not ok:
        return why
    if os.getuid() != 0 or shutil.which("dockerd") is None:
        return "a node's own dockerd needs root and the dockerd binary"
    return None


@pytest.fixture(scope="module")
def cluster():
    root = Path(tempfile.mkdtemp(prefix="rk-", dir="/tmp"))
    dockerd = None
    c = ray_cluster.LocalCluster(root)
    try:
        c.add_worker("n1")
        c.had_docker0 = Path("/sys/class/net/docker0").exists()      # the machine's engine's bridge
        if _engine() is None:
            dockerd = ray_cluster.Dockerd(root / "n2-docker")
            dockerd.start()
        c.add_worker("n2", docker_host=dockerd.host if dockerd else None)
        c.dockerd = dockerd
        yield c
    finally:
        c.stop()
        if dockerd:
            dockerd.stop()
        shutil.rmtree(root, ignore_errors=True)


def _cmd(c, tiny_dir: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(tiny_dir), "--only", "tiny",
            "--backend", "ray", "--ray-address", c.address, "--no-certify", "--variants", "fixed",
            "--state-dir", str(tmp_path / "state"),
            "--reports-dir", str(tmp_path / "reports"), "--data-dir", str(tmp_path / "data"), "--name", "t", *extra]


def _env(**extra: str) -> dict:
    return {**os.environ, **ray_cluster.RAY_ENV, FAKE_SLOTS_ENV: "1", **extra}


def _stored(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "state" / "results").glob("*.json"))]


class SocketWatch:
    """Every TCP and UDP socket of the cluster, the CLI and what they start, sampled while the CLI runs."""

    def __init__(self, cluster, proc: subprocess.Popen) -> None:
        import threading
        self.seen: set[tuple[str, str, str]] = set()
        self.thread = threading.Thread(target=self._watch, args=(cluster, proc), daemon=True)
        self.thread.start()

    def _watch(self, cluster, proc) -> None:
        while proc.poll() is None:
            self.seen.update(ray_cluster.sockets_of(cluster.pids() | ray_cluster.process_tree([proc.pid])))
            time.sleep(0.3)

    def outside(self) -> list[tuple[str, str, str]]:
        """Sockets bound to, or connected to, anything but the loopback (a listener's peer is a wildcard)."""
        self.thread.join()
        assert self.seen
        return sorted(s for s in self.seen if not (_loopback(s[0]) and (s[1].endswith(":*") or _loopback(s[1]))))


def _loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host in ("*", "0.0.0.0", "::"):
        return False
    host = host.removeprefix("::ffff:")
    return ipaddress.ip_address(host.split("%")[0]).is_loopback


def test_unfit_nodes_and_lost_runs_are_said_plainly(tiny_dir, data_dir):
    from conftest import tiny_specs

    from reprokit.environments.envs import ENVS
    from reprokit.execute import cluster as cl
    from reprokit.execute import node_tasks
    from reprokit.runners.local import LocalRunner
    spec = tiny_specs(tiny_dir, data_dir)["pytorch"]
    job = node_tasks.Job("local", "cpu", head=None)
    runner = LocalRunner(ENVS, data_dir, "cpu")
    spec["provenance"].update(runner.describe("pytorch"))
    assert node_tasks._differs(job, runner, RunSpec.from_dict(spec)) is None
    other = {**spec, "provenance": {**spec["provenance"], "code_sha256": "0" * 64}}
    assert "kit code differs from the head's" in node_tasks._differs(job, runner, RunSpec.from_dict(other))
    other = {**spec, "provenance": {**spec["provenance"], "lock_sha256": "0" * 64}}
    assert "lock file locks/pytorch.txt differs" in node_tasks._differs(job, runner, RunSpec.from_dict(other))
    # what makes a node unfit, as the census reports it in the one-sentence refusal
    facts = {"resources": {"GPU": 8.0, "CPU": 96.0}, "docker": False, "docker_why": "no Docker engine answers",
             "nvidia_runtime": False}
    assert cl._why_not(facts, "docker", "gpu").startswith("no Docker engine")
    assert cl._why_not({**facts, "docker": True}, "docker", "gpu") == "no NVIDIA container runtime"
    assert cl._why_not({**facts, "resources": {"CPU": 96.0}}, "local", "gpu") == "no GPU"
    assert cl._why_not(facts, "local", "gpu") is None
    lost = cl._lost(RunSpec.from_dict(spec), "ab" * 28, 1, RuntimeError("the node died"))
    assert results.problems(lost) is None and lost["failure"]["kind"] == "node-lost"
    assert "after one retry on another node" in lost["failure"]["message"]


def test_bad_cluster_input_is_one_sentence_before_any_run(cluster, tiny_dir, tmp_path):
    nobody = f"127.0.0.1:{ray_cluster.free_port()}"
    cases = [
        (["--ray-address", nobody], [f"no Ray cluster answers at {nobody}"]),
        (["--ray-runner", "local", "--gpus", "all"], ["no node of the Ray cluster at", "needs a GPU", "no GPU"]),
        (["--parallel", "2"], ["--parallel is for one host"]),
        (["--devices", "2"], ["--devices 2 places each run on 2 fake (test-only) GPU slots of one node, and the "
                              "largest node of the Ray cluster at", "that can serve a run has 1; give --devices 1 "
                              "or less"]),
    ]
    for extra, fragments in cases:
        cmd = _cmd(cluster, tiny_dir, tmp_path, *extra)     # a second --ray-address wins over the first
        proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and all(f in errors[0] for f in fragments), proc.stderr
        assert "[run" not in proc.stdout and not (tmp_path / "state" / "results").exists()


def test_each_node_runs_the_pinned_image_in_its_own_engine(cluster, tiny_dir, tmp_path):
    why = _engine()
    if why:
        if os.environ.get("REPROKIT_REQUIRE_DOCKER") == "1":
            pytest.fail(f"REPROKIT_REQUIRE_DOCKER=1 but {why}")
        pytest.skip(why)
    import docker
    extra_ca = os.environ.get("REPROKIT_EXTRA_CA") or "/etc/ssl/certs/ca-certificates.crt"
    ca = {"REPROKIT_EXTRA_CA": extra_ca} if Path(extra_ca).is_file() else {}
    env = _env(REPROKIT_BASE_OVERRIDE=TEST_BASE, **ca)
    # Two TensorFlow runs at once: one on each node (each has one slot).
    proc = subprocess.Popen(_cmd(cluster, tiny_dir, tmp_path, "--frameworks", "tensorflow", "--repeats", "2"),
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watch = SocketWatch(cluster, proc)
    out, _ = proc.communicate(timeout=1200)
    assert proc.returncode == 0, out[-5000:]
    assert not watch.outside(), watch.outside()     # the image's own stream included
    stored = _stored(tmp_path)
    assert len(stored) == 2 and all(r["status"] == "ok" for r in stored)
    by_node = {r["launcher"]["node"]["id"]: r for r in stored}
    assert set(by_node) == {cluster.node_id("n1"), cluster.node_id("n2")}
    main_engine = docker.from_env()
    own_engine = docker.DockerClient(base_url=cluster.dockerd.host)
    for r in stored:
        assert results.problems(r) is None and r["launcher"]["backend"] == "docker"
        tag = r["provenance"]["image"]
        assert r["launcher"]["image"]["ref"] == tag and r["launcher"]["container"]["network"] == "none"
        assert r["launcher"]["image"]["id"] == main_engine.images.get(tag).id
        assert r["launcher"]["node"]["staged"]["data"] is True      # each node's own data folder, checked once
    # n2 loaded the head's image into its own engine; n1's engine (the machine's) had it already
    assert by_node[cluster.node_id("n2")]["launcher"]["node"]["staged"]["image"] is True
    assert by_node[cluster.node_id("n1")]["launcher"]["node"]["staged"]["image"] is False
    assert own_engine.images.get(tag).id == main_engine.images.get(tag).id
    assert not own_engine.containers.list(all=True), "the node's engine keeps no container"
    assert Path("/sys/class/net/docker0").exists() == cluster.had_docker0, "the node's engine left the host's alone"


def test_a_users_script_folder_is_staged_to_the_node_that_runs_it(cluster, tmp_path, kit_python, data_dir):
    """A script and the helper module it imports, in a folder of the user's: the node runs a copy staged from
    the head (checked against the spec's sha256 by the probe), and the result keeps the folder as planned."""
    kit_python("pytorch")
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("torch_twin.py", "helpers.py"):
        shutil.copy(REPO / "tests" / "user_scripts" / name, folder / name)
    cmd = [sys.executable, "-m", "reprokit", "reproduce", "--script", f"pytorch={folder / 'torch_twin.py'}",
           "--frameworks", "pytorch", "--backend", "ray", "--ray-address", cluster.address, "--ray-runner", "local",
           "--no-certify", "--state-dir", str(tmp_path / "state"), "--reports-dir", str(tmp_path / "reports"),
           "--data-dir", str(data_dir), "--name", "mine"]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    (r,) = _stored(tmp_path)
    assert r["status"] == "ok" and results.problems(r) is None and r["spec"]["script"]["folder"] == str(folder)
    staged = Path(r["launcher"]["node"]["staged"]["script"])
    node = next(n for n in ("n1", "n2") if r["launcher"]["node"]["id"] == cluster.node_id(n))
    assert staged.parent == cluster.root / node / "scripts"
    assert sorted(p.name for p in staged.iterdir()) == ["helpers.py", "torch_twin.py"]
    assert all((staged / n).read_bytes() == (folder / n).read_bytes() for n in ("helpers.py", "torch_twin.py"))
    assert r["effective"]["batch_size"]["configured"] == 32 and r["model"]["parameters"]["total"] > 0


def test_a_lost_node_is_retried_elsewhere_and_nothing_is_lost(cluster, tiny_dir, tmp_path, kit_python):
    kit_python("pytorch"), kit_python("tensorflow")          # the nodes share the lock files' environments
    cmd = _cmd(cluster, tiny_dir, tmp_path, "--ray-runner", "local")
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Wait until both nodes run a run (their ledgers say so), look at every socket, then lose n1.
    def running(node: str) -> list[str]:
        entries = [json.loads(p.read_text()) for p in (cluster.root / node / "ledger").glob("*.json")]
        return [e["run_id"] for e in entries if e["end"] is None]

    watch = SocketWatch(cluster, proc)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (running("n1") and running("n2")):
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    (lost_run,) = running("n1")
    n1 = cluster.node_id("n1")
    cluster.kill("n1")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out

    assert not watch.outside(), watch.outside()     # nothing but this machine's loopback
    stored = {r["run_id"]: r for r in _stored(tmp_path)}
    assert len(stored) == 2 and all(r["status"] == "ok" for r in stored.values()), out
    for r in stored.values():
        assert results.problems(r) is None
        assert r["launcher"]["node"]["id"] in (n1, cluster.node_id("n2"))
        assert r["launcher"]["placement"]["fake"] is True
    retried = stored[lost_run]
    assert retried["launcher"]["attempts"] == [{"node_id": n1, "failure": "node-lost"}]
    assert retried["launcher"]["node"]["id"] == cluster.node_id("n2")
    assert "lost: retrying on another node" in out
    # Same specs, same provenance as a local run: a local run of the same matrix finds both finished.
    local = subprocess.run(cmd[:cmd.index("--backend")] + ["--backend", "local"] + cmd[cmd.index("--no-certify"):],
                           cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert "2 already finished, 0 to run" in local.stdout, local.stdout + local.stderr


def test_the_memory_limit_reaches_each_nodes_docker_runner(tmp_path):
    """--memory-limit travels in the Job; a node's Docker runner applies it, auto as a share of its own engine
    host's memory (here this host's engine stands for a node's)."""
    from reprokit.errors import UserError
    from reprokit.execute import node_tasks
    from reprokit.execute.executors import RayExecutor
    from reprokit.runners import container_limits
    from reprokit.runners.docker import DockerRunner
    if not host_checks.engine_status()[0]:
        pytest.skip("no Docker engine answers here")
    head_runner = DockerRunner(REPO, tmp_path, "none")
    executor = RayExecutor("127.0.0.1:6379", [], 1, "cpu", tmp_path, tmp_path / "ledger", memory_limit="2g")
    job = executor.job(head_runner, None, {})
    assert (job.runner, job.memory_limit) == ("docker", "2g")
    assert node_tasks._node_runner(job, tmp_path).memory_bytes() == 2 << 30
    node = node_tasks._node_runner(node_tasks.Job("docker", "cpu", head=None), tmp_path)
    engine_host = node.client.info()["MemTotal"]
    assert node.memory_bytes() == int(engine_host * container_limits.AUTO_SHARE) > 0
    with pytest.raises(UserError, match="--memory-limit lots is not understood"):
        RayExecutor("127.0.0.1:6379", [], 1, "cpu", tmp_path, tmp_path / "ledger",
                    memory_limit="lots").prepare(head_runner, set())

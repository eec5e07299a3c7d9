"""A real Ray cluster on this machine for the tests and the bench, loopback only.

Ray's own multi-node ``ray.cluster_utils.Cluster`` runs a real GCS and one
real raylet per node, in processes of their own. The head has no CPU for
tasks (it keeps the store and serves the staged files); each worker node has
one CPU, one fake GPU slot (the test-only switch), its own state folder
(REPROKIT_NODE_DIR) and, where given, its own Docker engine (DOCKER_HOST).
Every Ray process binds to 127.0.0.1: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes
Ray take the loopback address as each node's IP instead of the one that routes
outward, and no process reports usage statistics. Import this module before
Ray: Ray reads these variables when it is imported.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from reprokit.environments.topology import FAKE_SLOTS_ENV
from reprokit.execute.cluster import FAKE_RESOURCE
from reprokit.execute.node_tasks import NODE_DIR_ENV

LOOPBACK = "127.0.0.1"
# For every Ray process of a test (the CLI's driver included): loopback, no usage statistics.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
os.environ.update(RAY_ENV)
OBJECT_STORE = 100 << 20
DATA_ROOT_SIZE = "6g"       # a node engine's tmpfs: a cap, not a reservation (the TensorFlow image takes ~2 GB)


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on (now)."""
    import socket
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class LocalCluster:
    """A head and worker nodes; ``kill(name)`` takes a node away at once, as a machine that loses power."""

    def __init__(self, root: Path) -> None:
        """root: a short path (Ray's unix sockets live under it and their paths must stay under 108 bytes)."""
        from ray._private import ray_constants
        from ray.cluster_utils import Cluster
        if ray_constants.ENABLE_RAY_CLUSTER:
            raise RuntimeError("Ray was imported before tests/ray_cluster.py set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0; "
                               "its nodes would take this host's outward address instead of the loopback")
        self.root = root
        os.environ["RAY_TMPDIR"] = str(root)      # Ray's own files (and the current-cluster note) stay in here
        self.cluster = Cluster(initialize_head=True, shutdown_at_exit=True, head_node_args={
            "num_cpus": 0, "include_dashboard": False, "object_store_memory": OBJECT_STORE,
            "temp_dir": str(root / "ray"), "env_vars": {NODE_DIR_ENV: str(root / "head")}})
        self.address = self.cluster.address
        self.nodes: dict[str, object] = {}

    def add_worker(self, name: str, docker_host: str | None = None):
        """A node with one fake GPU slot on a CPU of its own where there are enough (as if a machine of its own)."""
        cpus = sorted(os.sched_getaffinity(0))
        env = {NODE_DIR_ENV: str(self.root / name),
               FAKE_SLOTS_ENV: f"cpus:{cpus[len(self.nodes) % len(cpus)]}"}
        if docker_host:
            env["DOCKER_HOST"] = docker_host
        node = self.cluster.add_node(num_cpus=1, resources={FAKE_RESOURCE: 1}, env_vars=env,
                                     object_store_memory=OBJECT_STORE)
        self.nodes[name] = node
        return node

    def node_id(self, name: str) -> str:
        return self.nodes[name].node_id

    def kill(self, name: str) -> None:
        self.cluster.remove_node(self.nodes.pop(name), allow_graceful=False)

    def pids(self) -> set[int]:
        """Every process of every node, their workers included."""
        nodes = [self.cluster.head_node, *self.cluster.worker_nodes]
        roots = [p.process.pid for n in nodes for procs in n.all_processes.values() for p in procs]
        return process_tree(roots)

    def stop(self) -> None:
        import ray
        if ray.is_initialized():          # a driver in this process (the bench) goes first
            ray.shutdown()
        self.cluster.shutdown()


class Dockerd:
    """A Docker engine of a node's own: its data root, socket, pid file and exec root; no bridge, no iptables.

    It runs in a network namespace of its own (`unshare --net`): a dockerd started with
    `--bridge none` deletes the host's docker0, which the machine's own engine needs.
    Its containers have no network anyway, and its socket is a file the node reaches.
    Its data root is a tmpfs of its own: the node's copy of the head's image (about 2 GB for TensorFlow) is
    really loaded and really run, but written to memory, and removed with one unmount instead of a minute of
    unlinking on the disk.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DATA_ROOT_SIZE}", "tmpfs", str(self.root / "data")],
                       check=True)
        log = open(self.root / "dockerd.log", "w")
        self.proc = subprocess.Popen(
            ["unshare", "--net", "--", "dockerd", "--data-root", str(self.root / "data"),
             "--exec-root", str(self.root / "exec"),
             "--pidfile", str(self.root / "docker.pid"), "-H", self.host, "--bridge", "none",
             "--iptables=false", "--ip-masq=false", "--ip-forward=false"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        import docker
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dockerd exited: {(self.root / 'dockerd.log').read_text()[-2000:]}")
            try:
                docker.DockerClient(base_url=self.host, timeout=5).version()
                return
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.3)
        raise TimeoutError(f"dockerd at {self.host} did not answer in {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # its overlay mounts and its tmpfs go with it; what is left is its log and sockets' folder
        subprocess.run(["umount", "-R", str(self.root / "data")], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def sockets_of(pids: set[int]) -> list[tuple[str, str, str]]:
    """(local, peer, process) of every TCP and UDP socket of these processes, from `ss -tuanp`."""
    out = subprocess.run(["ss", "-tuanpH"], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split()
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if len(parts) >= 6 and owners & pids:
            rows.append((parts[4], parts[5], " ".join(parts[6:])))
    return rows


def process_tree(roots: list[int]) -> set[int]:
    """These processes and all their descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        pid = int(stat.parent.name)
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(pid)
    seen, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, []))
    return seen

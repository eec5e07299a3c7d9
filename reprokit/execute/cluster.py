"""--backend ray: every run is a Ray task on a node of an existing cluster, run by that node's own runner.

Ray runs on the hosts, never in a container. The head (where `reprokit
reproduce` runs) plans, builds the images on its own engine, and keeps the
store. Each task asks for the GPUs its run holds (``num_gpus=N`` at --devices
N, all of one node: Ray places a task's resources on one node; CPU runs ask for
their threads), and on its node (reprokit/execute/node_tasks.py):

- stages what the run needs, once per node and checked: the dataset file
  (through Ray), verified against the spec's sha256; a user's script folder
  (the probe checks the .py files against the spec's sha256) and its extra
  requirements (their wheels into the node's per-user cache, the set installed
  there once, hash-checked, as on the head); under Docker the image,
  streamed from a `docker save` on the head's engine into the node's (a
  one-time socket on the head's cluster address) and verified by image id
  (its tag is named after its content);
- pins the run to the GPUs Ray gave it, with CPUs and memory nodes near them;
- runs it with the node's own runner (the same least-privilege container on
  every node, or the node's virtualenv) and returns the result.

Results are stored on the head the moment each task returns, so a Ctrl-C or
a lost head keeps what finished and the same command resumes. A node lost
mid-run ends that run as ``node-lost``, retried once on another node.

A node's settings come from its own environment (that of its `ray start`):
``REPROKIT_NODE_DIR`` (its state: data cache, work folders, ledger; default
``.reprokit/node``) and ``DOCKER_HOST`` (its engine, as for the docker CLI).
"""
from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from reprokit.console import RunProgress
from reprokit.environments.topology import FAKE_SLOTS_ENV
from reprokit.errors import UserError
from reprokit.execute.device_placement import held
from reprokit.execute.node_staging import CHUNK
from reprokit.execute.node_tasks import Job, _node_facts, _node_run
from reprokit.kits.contract.spec import RunSpec, Spec, Threads
from reprokit.results import results
from reprokit.runners.base import Runner

if TYPE_CHECKING:
    from reprokit.results.store import Store
    from reprokit.runners.docker import DockerRunner

    Pending = dict[Any, tuple[int, Spec, int, tuple[str, ...]]]     # a task's ref -> (index, spec, attempt, lost)

FAKE_RESOURCE = "reprokit_fake_gpu"   # what a task asks for under the test-only fake-slot switch
NODE_LABEL = "ray.io/node-id"
STOP_GRACE_S = 60
LOST_KINDS = ("NodeDiedError", "LocalRayletDiedError", "WorkerCrashedError", "ObjectLostError", "OwnerDiedError")


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError("--backend ray needs Ray on this host: pip install 'reprokit[ray]' "
                        "(it goes in the host environment only, never in the kit images).") from None
    return ray


# ---------------------------------------------------------------------------
# The head

class _Head:
    """An actor on the head node: serves the data files by name and the images as `docker save` streams,
    and collects the runs' progress events."""

    def __init__(self, files: dict[str, str], docker_host: str | None) -> None:
        self.files = files
        self.docker_host = docker_host
        self.events: list[tuple[str, dict[str, Any]]] = []

    def names(self) -> list[str]:
        return sorted(self.files)

    def size(self, name: str) -> int:
        return os.path.getsize(self.files[name])

    def read(self, name: str, offset: int, size: int) -> bytes:
        with open(self.files[name], "rb") as fh:
            fh.seek(offset)
            return fh.read(size)

    def image_stream(self, ref: str) -> tuple[str, int, str]:
        """(host, port, token) where one node may read a `docker save` of one of the head's images.

        A socket of its own, on the head's cluster address: Ray's object store moves bulk
        bytes several times slower than the engine writes them. It serves one connection
        that sends the token, then closes.
        """
        import docker
        ray = _ray()
        client = docker.DockerClient(base_url=self.docker_host) if self.docker_host else docker.from_env()
        image = client.images.get(ref)
        token = secrets.token_hex(16)
        server = socket.create_server((ray.util.get_node_ip_address(), 0))
        server.settimeout(600)

        def serve() -> None:
            with server, contextlib.suppress(OSError):     # a node that never connects: it times out
                conn, _ = server.accept()
                with conn:
                    if conn.recv(len(token), socket.MSG_WAITALL).decode(errors="replace") != token:
                        return
                    for chunk in image.save(chunk_size=CHUNK, named=ref):
                        conn.sendall(chunk)
        threading.Thread(target=serve, daemon=True).start()
        host, port = server.getsockname()[:2]
        return host, port, token

    def event(self, run_id: str, event: dict[str, Any]) -> None:
        self.events.append((run_id, event))

    def drain(self) -> list[tuple[str, dict[str, Any]]]:
        out, self.events = self.events, []
        return out


def connect(address: str) -> None:
    """Join the cluster at address (host:port) as its driver; UserError when nothing answers there."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--ray-address {address!r} is not HOST:PORT; give the head's address as "
                        f"`ray start --head` printed it, e.g. 10.0.0.5:6379.")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise UserError(f"no Ray cluster answers at {address} ({exc.strerror or exc}); start its head with "
                        f"`ray start --head --port {port}` or check the address.") from None
    ray = _ray()
    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False,
             configure_logging=False, include_dashboard=False)


def has_gpus() -> bool:
    """Whether any node of the cluster offers a GPU."""
    gpus: float = _ray().cluster_resources().get("GPU", 0)
    return gpus >= 1


def census(job_runner: str, device: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Every alive node's facts, and the ids of those that can serve a run of this command."""
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    nodes = [n for n in ray.nodes() if n["Alive"]]
    probe = ray.remote(_node_facts)
    refs = [probe.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
            .remote(job_runner) for n in nodes]
    facts: list[dict[str, Any]] = []
    serving: list[str] = []
    for n, ref in zip(nodes, refs):
        try:
            f = ray.get(ref, timeout=120)
            f["resources"] = n["Resources"]
            f["why_not"] = _why_not(f, job_runner, device)
        except ray.exceptions.RayError as exc:        # gone or stuck since ray.nodes() listed it
            f = {"node_id": n["NodeID"], "hostname": n.get("NodeManagerHostname", "?"), "resources": {},
                 "why_not": f"did not answer ({_short(exc)})"}
        facts.append(f)
        if f["why_not"] is None:
            serving.append(n["NodeID"])
    return facts, serving


def _slot_resource(device: str) -> str:
    """The Ray resource a run takes one (CPU runs: one per thread) of."""
    if device == "gpu":
        return "GPU"
    return FAKE_RESOURCE if os.environ.get(FAKE_SLOTS_ENV) else "CPU"


def _slot_request(device: str, spec: Spec) -> dict[str, Any]:
    """The Ray resources one run asks for: as many GPUs (or fake slots) as its devices, all on one node."""
    resource = _slot_resource(device)
    if resource == "GPU":
        return {"num_gpus": held(spec)}
    if resource == "CPU":
        # "auto" is resolved by the kit on its node; the task reserves what it resolved to on the head (a script
        # sets its own threads: it reserves the head's CPUs too), and at least a CPU for each stand-in device
        threads = spec.numerics.cpu_threads if isinstance(spec, RunSpec) else Threads(intra_op="auto", inter_op=1)
        return {"num_cpus": max(threads.intra(), held(spec))}
    return {"resources": {resource: held(spec)}}


def _why_not(facts: dict[str, Any], job_runner: str, device: str) -> str | None:
    resource = _slot_resource(device)
    if facts["resources"].get(resource, 0) < 1:
        return {"GPU": "no GPU", "CPU": "no CPU for tasks"}.get(resource, f"no {resource} slot")
    if job_runner == "docker" and not facts["docker"]:
        return f"no Docker engine ({facts['docker_why']})"
    if job_runner == "docker" and device == "gpu" and not facts["nvidia_runtime"]:
        return "no NVIDIA container runtime"
    return None


def check(job_runner: str, device: str, address: str, widest: int = 1) -> tuple[list[str], int, dict[str, int]]:
    """The nodes that can serve a run, how many runs they take at once, and each one's slots by its hostname (the
    description the dry run places the runs on); UserError naming why each node cannot when none can, and where
    no node has the slots of the widest run (--devices N: a run's GPUs are all on one node)."""
    facts, serving = census(job_runner, device)
    if not serving:
        why = "; ".join(f"{f['hostname']} ({f['node_id'][:8]}): {f['why_not']}" for f in facts)
        need = "a GPU" if device == "gpu" else "a slot"
        raise UserError(f"no node of the Ray cluster at {address} can serve a run, which needs {need}"
                        f"{' and a Docker engine' if job_runner == 'docker' else ''} ({why}); start a "
                        f"node that has them with `ray start --address {address}`.")
    resource = _slot_resource(device)
    slots = {f"{f['hostname']} ({f['node_id'][:8]})": int(f["resources"].get(resource, 0))
             for f in facts if f["node_id"] in serving}
    widest_fit(widest, slots, address, resource)
    return serving, sum(slots.values()), slots


def widest_fit(widest: int, slots: dict[str, int], address: str, resource: str = "GPU") -> None:
    """A run at ``widest`` devices takes them all on one node: refused in one sentence where no node has them."""
    largest = max(slots.values(), default=0)
    if widest > largest:
        what = {"GPU": "GPUs", "CPU": "CPUs", FAKE_RESOURCE: "fake (test-only) GPU slots"}[resource]
        raise UserError(f"--devices {widest} places each run on {widest} {what} of one node, and the largest node "
                        f"of the Ray cluster at {address} that can serve a run has {largest}; give --devices "
                        f"{largest} or less, or start a node with {widest} {what} with `ray start --address "
                        f"{address}`.")


def stage_on_head(runner: Runner, frameworks: set[str], data_files: dict[str, Path],
                  scripts: dict[str, str] | None = None) -> tuple[object, dict[str, dict[str, str]]]:
    """The Head actor serving the data files and the scripts' (and, under Docker, each image as a `docker
    save` stream)."""
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    files = {**{f"data/{name}": str(path) for name, path in data_files.items()}, **(scripts or {})}
    staged: dict[str, dict[str, str]] = {}
    if runner.name == "docker":
        images = cast("DockerRunner", runner)
        for fw in sorted(frameworks):
            staged[fw] = {"ref": images.recipe(fw).tag, "id": images.image_id(fw)}
    here = ray.get_runtime_context().get_node_id()
    head = ray.remote(_Head).options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
        here, soft=False)).remote(files, os.environ.get("DOCKER_HOST"))
    return head, staged


def run_all(job: Job, todo: Sequence[Spec], serving: list[str], store: Store,
            progress_for: Callable[[int, Spec], RunProgress]) -> tuple[int, bool]:
    """Every spec as a task on a serving node; (failed runs, interrupted). Results stored as they come.

    progress_for(i, spec) makes the display of the i-th run (from 0) when it starts on its node.
    """
    ray = _ray()
    task = ray.remote(_node_run)
    pending: Pending = {}            # ref -> (index, spec, attempt, lost nodes)
    where: dict[str, str] = {}       # run id -> node id it started on (from its first event)
    shown: dict[str, RunProgress] = {}
    failures = 0

    def submit(i: int, spec: Spec, attempt: int, lost: tuple[str, ...]) -> None:
        nodes = [n for n in serving if n not in lost]
        selector = {NODE_LABEL: f"in({','.join(nodes)})"} if nodes else {NODE_LABEL: f"!in({','.join(lost)})"}
        ref = task.options(max_retries=0, label_selector=selector, **_slot_request(job.device, spec)).remote(
            job, spec)
        pending[ref] = (i, spec, attempt, lost)

    def display(i: int, spec: Spec) -> RunProgress:
        if spec.run_id not in shown:
            shown[spec.run_id] = progress = progress_for(i, spec)
            progress.tty = False     # several runs at once: lines, not one line rewritten in place
        return shown[spec.run_id]

    def store_result(i: int, spec: Spec, result: dict[str, Any]) -> None:
        nonlocal failures
        store.put(result)
        failures += result["status"] != "ok"
        node = result.get("launcher", {}).get("node", {}).get("hostname", "?")
        display(i, spec).done((result["status"] if result["status"] == "ok" else
                               f"FAILED ({result['failure']['kind']}: {result['failure']['message']})") + f" · {node}")

    for i, spec in enumerate(todo):
        submit(i, spec, 0, ())
    by_run = {spec.run_id: (i, spec) for i, spec in enumerate(todo)}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for run_id, event in ray.get(job.head.drain.remote()):
                if "node_id" in event:
                    where[run_id] = event["node_id"]
                    display(*by_run[run_id])
                else:
                    display(*by_run[run_id])(event)
            for ref in ready:
                i, spec, attempt, lost = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    node = where.get(spec.run_id)
                    if _node_lost(exc, node):
                        result = _lost(spec, node, attempt, exc)
                        if attempt == 0:
                            print(f"{display(i, spec).label} · node {node[:8] if node else '?'} lost: retrying on "
                                  f"another node", flush=True)
                            submit(i, spec, 1, (*lost, node) if node else lost)
                            continue
                    else:
                        result = results.failure(spec.to_dict(), "error", f"the Ray task failed: {_short(exc)}",
                                                 [], 0.0, {"backend": "ray", "node": {"id": node}})
                if result is None:
                    _stop(ray, pending, store_result)
                    return failures, True
                if attempt:
                    result.setdefault("launcher", {})["attempts"] = [
                        {"node_id": n, "failure": "node-lost"} for n in lost]
                store_result(i, spec, result)
    except KeyboardInterrupt:
        _stop(ray, pending, store_result)
        return failures, True
    return failures, False


def _node_lost(exc: Exception, node_id: str | None) -> bool:
    """Whether a task failed because its node went away (not because of what it ran).

    Ray says so in the error's type at once; the GCS marks the node dead only after its health checks.
    """
    if type(exc).__name__ in LOST_KINDS:
        return True
    return node_id is not None and {n["NodeID"]: n["Alive"] for n in _ray().nodes()}.get(node_id) is False


def _lost(spec: Spec, node_id: str | None, attempt: int, exc: Exception) -> dict[str, Any]:
    return results.failure(spec.to_dict(), "node-lost",
                           f"node {node_id or '(unknown)'} was lost mid-run"
                           + (" (after one retry on another node)" if attempt else ""),
                           [_short(exc)], 0.0, {"backend": "ray", "node": {"id": node_id}})


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def _stop(ray: Any, pending: Pending, store_result: Callable[[int, Spec, dict[str, Any]], None]) -> None:
    """Ctrl-C: each running task gets a KeyboardInterrupt (its runner cleans up); keep what ends with a result."""
    for ref in pending:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=False)
    deadline = time.monotonic() + STOP_GRACE_S
    while pending and time.monotonic() < deadline:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.1, deadline - time.monotonic()))
        for ref in ready:
            i, spec, _, _ = pending.pop(ref)
            with contextlib.suppress(ray.exceptions.RayError):
                result = ray.get(ref)
                if result is not None:
                    store_result(i, spec, result)

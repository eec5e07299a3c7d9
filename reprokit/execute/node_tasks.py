"""What the head's Ray tasks do on a node: tell what the node can do (the census's probe) and run one spec with
the node's own runner, staged, pinned to its slot and checked against the head's code.

Everything here runs in a Ray worker on the node (Ray is there: it runs the task); the head's side, which
submits these tasks, is reprokit/execute/cluster.py. The Job is what each run's task carries from the head.
The tasks keep their private names: Ray names a task's worker process and its errors after its function.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from reprokit.environments import cache
from reprokit.environments.topology import FAKE_SLOTS_ENV, Placement, fake_slots, gpu_slots, joined
from reprokit.errors import UserError
from reprokit.execute.device_placement import held
from reprokit.execute.node_staging import stage_data, stage_image, stage_script
from reprokit.execute.schedule import Ledger, run_placed
from reprokit.kits.contract.spec import ScriptSpec, Spec
from reprokit.results import provenance, results
from reprokit.runners.base import Runner
from reprokit.runners.make import make

if TYPE_CHECKING:
    from reprokit.runners.docker import DockerRunner
    from reprokit.runners.local import LocalRunner

NODE_DIR_ENV = "REPROKIT_NODE_DIR"
PROGRESS_EVERY_S = 2.0


@dataclass
class Job:
    """What every task of one command needs from the head."""

    runner: str                                 # "docker" | "local": the runner each node uses
    device: str                                 # "cpu" | "gpu"
    head: Any                                   # the Head actor's handle: files and progress
    images: dict[str, dict[str, str]] = field(default_factory=dict)   # framework -> {"ref", "id"}
    extra_dirs: tuple[str, ...] = ()
    memory_limit: str = "auto"                  # --memory-limit for each node's containers; auto: of that node's host


# ---------------------------------------------------------------------------
# A node (everything below runs in a Ray worker on the node)

def _node_dir() -> Path:
    """The node's staged data, scripts, slots and work: its user's cache, shared by the commands that reach it."""
    return Path(os.environ.get(NODE_DIR_ENV) or cache.root() / "node").resolve()


def _node_facts(job_runner: str) -> dict[str, Any]:
    """What a node can do, seen from the node itself."""
    import ray
    facts: dict[str, Any] = {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
             "node_dir": str(_node_dir()), "docker": False, "docker_why": "not asked", "nvidia_runtime": False,
             "fake_slots": os.environ.get(FAKE_SLOTS_ENV)}
    if job_runner == "docker":
        from reprokit.environments import host_checks
        facts["docker"], facts["docker_why"] = host_checks.engine_status()
        if facts["docker"]:
            import docker
            facts["nvidia_runtime"] = host_checks.nvidia_runtime_available(docker.from_env(timeout=30))
    return facts


@contextlib.contextmanager
def _slot(node_dir: Path, device: str, n: int = 1) -> Iterator[Placement | None]:
    """This task's placement on the node: the n GPUs Ray gave it (--devices n), joined into one, or n free fake
    slots (test-only switch)."""
    import ray
    if device == "gpu":
        from reprokit.environments.host_checks import resolve_gpus
        ids = {str(i) for i in ray.get_gpu_ids()}
        rows = resolve_gpus("all")
        mine = [i for i, r in enumerate(rows) if str(r["index"]) in ids or r["uuid"] in ids]
        slots = gpu_slots(rows)
        yield joined([slots[i] for i in mine]) if mine else None
        return
    with _fake_slots(node_dir, n) as taken:
        yield joined(taken) if taken else None


@contextlib.contextmanager
def _fake_slots(node_dir: Path, n: int) -> Iterator[list[Placement]]:
    """n of the node's fake slots (the test-only switch), each held by a lock file while the run goes; [] where the
    switch is off, or where Ray gave this node more fake-GPU tasks than it has slots free (the run goes unpinned)."""
    slots = fake_slots()
    with contextlib.ExitStack() as locks:
        taken: list[Placement] = []
        for i, placement in enumerate(slots or []):
            if len(taken) == n:
                break
            lock = node_dir / "slots" / f"{i}.lock"
            lock.parent.mkdir(parents=True, exist_ok=True)
            fh = locks.enter_context(open(lock, "a"))
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            taken.append(placement)
        if len(taken) < n:
            locks.close()               # the slots it found are free for another run
            taken = []
        yield taken


def _node_runner(job: Job, node_dir: Path) -> DockerRunner | LocalRunner:
    extra = tuple(Path(d) for d in job.extra_dirs)
    if job.runner == "docker":
        import docker
        return make("docker", data_dir=node_dir / "data", device=job.device,
                    gpus="all" if job.device == "gpu" else "none", extra_dirs=extra, build_missing=False,
                    client=docker.from_env(timeout=120), log=lambda line: None, mem_limit=job.memory_limit,
                    pinned_images={fw: i["ref"] for fw, i in job.images.items()})
    # the envs: make's default, this node's per-user cache, built there from the same lock files
    return make("local", data_dir=node_dir / "data", device=job.device, extra_dirs=extra)


def _differs(job: Job, runner: Runner, spec: Spec) -> str | None:
    """Why this node's code or environment is not the one the spec was planned with, or None."""
    mine = provenance.code(tuple(Path(d) for d in job.extra_dirs))
    for key in ("code_sha256", "user_code_sha256"):
        if mine.get(key) != spec.provenance.get(key):
            return f"this node's {'kit' if key == 'code_sha256' else 'experiment'} code differs from the head's"
    if job.runner == "local":
        described = runner.describe(spec.framework)
        if described.get("lock_sha256") != spec.provenance.get("lock_sha256"):
            return f"this node's lock file {described.get('lock')} differs from the head's"
    return None


def _node_run(job: Job, spec: Spec) -> dict[str, Any] | None:
    """One run on this node: stage, pin, run with the node's runner; the result (None if cancelled)."""
    import ray
    node = {"id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname()}
    ray.get(job.head.event.remote(spec.run_id, {"node_id": node["id"]}))   # the head knows where before it starts
    node_dir = _node_dir()
    last = [0.0]

    def forward(event: dict[str, Any]) -> None:
        if event.get("phase") == "epoch" or time.monotonic() - last[0] >= PROGRESS_EVERY_S:
            last[0] = time.monotonic()
            job.head.event.remote(spec.run_id, event)

    t0 = time.perf_counter()
    staged: dict[str, Any] = {}
    try:
        runner = _node_runner(job, node_dir)
        problem = _differs(job, runner, spec)
        if problem:
            raise UserError(f"{problem}; update this node's checkout of reprokit.")
        staged["data"] = stage_data(job.head, spec, node_dir / "data")
        here = stage_script(job.head, spec, node_dir) if isinstance(spec, ScriptSpec) else spec
        if isinstance(here, ScriptSpec) and here is not spec:
            staged["script"] = here.script.folder
        if job.runner == "docker":
            client = cast("DockerRunner", runner).client
            staged["image"] = stage_image(job.head, job.images[spec.framework], client, node_dir)
        staged["seconds"] = round(time.perf_counter() - t0, 3)
        runner.prepare({spec.framework})
        with _slot(node_dir, job.device, held(here)) as placement:
            result = run_placed(runner, here, node_dir / "work", Ledger(node_dir / "ledger"), placement, forward)
        if result is not None and here is not spec:
            result["spec"] = spec.to_dict()      # as planned: the folder on the head, where its id was made
    except KeyboardInterrupt:
        return None
    except UserError as exc:
        result = results.failure(spec.to_dict(), "error", f"on node {node['hostname']}: {exc}", [],
                                 time.perf_counter() - t0, {"backend": job.runner})
    if result is not None:
        result.setdefault("launcher", {})["node"] = {**node, "staged": staged}
    return result

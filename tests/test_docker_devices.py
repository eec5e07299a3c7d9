"""A run at N devices under Docker: one container, its ranks' shared memory and environment, against a real engine.

The container is the Docker runner's own (least privilege, no network), made for a spec at --devices 2 on this
CPU: two gloo ranks, started in it as a launcher starts them, rendezvous on its loopback and reduce a tensor, and
read their /dev/shm (os.statvfs), their interfaces and their environment from inside. The image is the docker
tests' stand-in (tests/test_docker_runner.py: the project's Dockerfile on the local test base, an empty lock);
PyTorch reaches it from the host's kit environment, mounted read-only, so the ranks are real gloo ranks.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_docker_runner import _extra_ca_path, client, ok_result, probe_lock, test_base  # noqa: F401  (fixtures)

from reprokit.runners import base
from reprokit.runners import docker as dr

TORCH_SITE = "/opt/reprokit/torch-site"

# The stand-in kit: two gloo ranks in this container; each reports what it sees, then the kit writes its result.
RANKS_KIT = r'''
import argparse, json, os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank(r, world, queue):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29511", rank=r, world_size=world)
    total = torch.tensor([float(r + 1)])
    dist.all_reduce(total)
    shm = os.statvfs("/dev/shm")
    queue.put({"rank": r, "sum": total.item(), "shm_bytes": shm.f_blocks * shm.f_frsize,
               "interfaces": sorted(os.listdir("/sys/class/net")),
               "environment": {k: os.environ.get(k) for k in ("NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")}})
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--spec"); p.add_argument("--out"); p.add_argument("--data-dir")
    a = p.parse_args()
    spec = json.load(open(a.spec))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank, args=(r, spec["devices"], queue)) for r in range(spec["devices"])]
    for proc in procs:
        proc.start()
    seen = sorted((queue.get(timeout=120) for _ in procs), key=lambda s: s["rank"])
    for proc in procs:
        proc.join(60)
    print("REPROKIT-PROGRESS " + json.dumps({"ranks": seen}), flush=True)
    with open(a.out, "w") as fh:
        json.dump(spec["result"], fh)
'''


@pytest.fixture
def ranks_kits(tmp_path) -> Path:
    kits = tmp_path / "repo" / "kits"
    kits.mkdir(parents=True)
    (kits / "__init__.py").write_text("")
    (kits / "run.py").write_text(RANKS_KIT)
    for p in (kits.parent, kits, kits / "__init__.py", kits / "run.py"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return kits


@pytest.mark.docker
def test_a_run_at_two_devices_is_one_container_with_their_shared_memory_and_ranks_environment(
        client, test_base, probe_lock, ranks_kits, kit_python, tmp_path):  # noqa: F811  (fixtures)
    site = next((Path(kit_python("pytorch")).parent.parent / "lib").glob("python3*/site-packages"))
    data = tmp_path / "data"
    data.mkdir()
    for p in (tmp_path, data):
        p.chmod(0o755)
    runner = dr.DockerRunner(Path(__file__).resolve().parents[1], data, "none", [(site, TORCH_SITE)],
                             kits_dir=ranks_kits, base_override=test_base, lock_overrides={"tensorflow": probe_lock},
                             extra_ca=_extra_ca_path(), log=lambda line: None, client=client)
    runner.prepare({"tensorflow"})
    spec = {"run_id": "7e57" + os.urandom(6).hex(), "experiment": "ranks", "variant": "fixed",
            "framework": "tensorflow", "profile": "quick", "repeat": 0, "device": "cpu", "devices": 2,
            "limits": {"timeout_s": 300}}
    spec["result"] = ok_result(spec)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    call = base.spec_call(spec, spec_path, tmp_path / "out", runner.data_dir)
    events: list[dict] = []
    outcome = runner.run(call, events.append)
    assert outcome.exit_code == 0, outcome.log_tail[-30:]
    assert not [line for line in outcome.log_tail if "Unable to resolve hostname" in line]   # gloo found lo at once

    (seen,) = [e["ranks"] for e in events if "ranks" in e]
    print(f"\nfrom inside the container at --devices 2: {json.dumps(seen)}")
    assert [s["rank"] for s in seen] == [0, 1] and {s["sum"] for s in seen} == {3.0}      # two gloo ranks reduced
    assert {s["shm_bytes"] for s in seen} == {2 << 30}                                   # 1 GiB per device
    assert all(s["interfaces"] == ["lo"] for s in seen)                                  # network none: loopback
    assert all(s["environment"] == {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}
               for s in seen)
    container = outcome.launcher["container"]
    assert container["network"] == "none" and container["shm_bytes"] == 2 << 30
    assert container["ranks_environment"]["NCCL_DEBUG"] == "WARN"

    one = runner.container_config(base.spec_call({**spec, "devices": 1}, spec_path, tmp_path / "out",
                                                 runner.data_dir), "label")
    assert one["shm_size"] == 1 << 30 and "NCCL_DEBUG" not in one["environment"]     # one device: as before

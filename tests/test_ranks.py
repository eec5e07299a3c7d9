"""Every process of a script that trains is observed, bounded, and ended with the run (reprokit/kits/ranks/).

At the probe's level (the kit process, through the local runner, no matrix or report): tests/bound_scripts/
ddp_ranks.py's two DDP ranks, started with mp.spawn, each observed; each rank's bounded passes are its unbounded
run's first batches, in the same order, with the same losses, epoch after epoch; a rank that raises fails the run
with its own error, number, file and line; a rank that hangs is named, with the call it is in and its stack, and
no process outlives the run; ranks that never step say so. Then the host-side rules of reprokit/kits/ranks/ on recorded
results and stacks: the words, the totals, the earliest failure, who hangs.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import stub_matrix as sm
from checkout import REPO

from reprokit import cli
from reprokit.environments.envs import ENVS
from reprokit.execute import compose
from reprokit.kits.ranks import follow, gather, hang
from reprokit.runners.base import RESULT_NAME, spec_call
from reprokit.runners.local import LocalRunner

SCRIPTS = Path(__file__).parent / "bound_scripts"
BOUNDED = {"max_steps": 3, "epochs": 2, "eval_steps": 3}         # --profile quick --epochs 2
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(folder: Path, data_dir: Path, bounds: dict, env: dict[str, str] | None = None,
         timeout_s: float | None = None) -> tuple[dict, Path]:
    """ddp_ranks.py under the probe, as the local runner starts a kit: (its result, its output folder)."""
    parsed = cli.parse(["--script", f"pytorch={SCRIPTS / 'ddp_ranks.py'} {_free_port()}", "--frameworks", "pytorch",
                        "--backend", "local", "--profile", "quick", "--data-dir", str(data_dir), "--state-dir",
                        str(folder / "state"), *(["--timeout", str(timeout_s)] if timeout_s else [])])
    (planned,) = compose.build(parsed).specs
    spec = planned.to_dict() | {"bounds": bounds}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.json").write_text(json.dumps(spec))
    call = spec_call(spec, folder / "spec.json", folder / "out", data_dir)
    logs = {"REPROKIT_BOUND_LOG": str(folder / "records.jsonl"), "OMP_NUM_THREADS": "1", **(env or {})}
    before = {k: os.environ.get(k) for k in logs}
    os.environ.update(logs)                  # the local runner hands the kit this process's environment
    try:
        LocalRunner(ENVS, data_dir, "cpu").run(dataclasses.replace(call, timeout_s=(timeout_s or 600) + 30),
                                               lambda event: None)
    finally:
        for k, v in before.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return json.loads((call.output / RESULT_NAME).read_text()), call.output


def _records(folder: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (folder / f"records.jsonl.rank{rank}").read_text().splitlines()]


def _still_running(out: Path) -> list[int]:
    """The processes the probe attached to that still run after the run ended."""
    alive = []
    for marker in (out / "processes").glob("*.started"):
        pid = int(marker.name.removesuffix(".started"))
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            alive.append(pid)
    return alive


@pytest.fixture(scope="module")
def bounded_and_not(kit_python, data_dir, tmp_path_factory) -> dict[str, tuple[dict, Path, Path]]:
    kit_python("pytorch")
    tmp = tmp_path_factory.mktemp("ranks")
    done = {}
    for name, bounds in (("unbounded", dict.fromkeys(BOUNDED)), ("bounded", BOUNDED)):
        result, out = _run(tmp / name, data_dir, bounds)
        assert result["status"] == "ok", result.get("failure")
        done[name] = result, out, tmp / name
    return done


def test_each_rank_is_observed_with_its_batches_and_the_totals(bounded_and_not):
    result, out, _ = bounded_and_not["bounded"]
    p = result["processes"]
    assert p["seen"] == "2 ranks" and (p["ranks"], p["workers"]) == (2, 0)
    assert [(e["who"], e["steps"], e["batch_size"]["configured"], e["backend"]) for e in p["each"]] == [
        ("rank 0", 6, 16, "gloo"), ("rank 1", 6, 16, "gloo")]
    assert p["total"]["global_batch"] == 32 and p["total"]["samples"] == 2 * 6 * 16
    assert p["total"]["memory"]["per_device"].startswith("n/a")
    assert [e["test_samples"] for e in p["each"]] == [250, 250]     # each rank tests its own shard of 500
    assert any("follows the script into every process" in s for s in result["probe"]["shims"])
    assert not _still_running(out)


def test_the_bound_holds_on_every_rank_and_changes_nothing_it_ran(bounded_and_not):
    (_, _, unbounded), (_, _, bounded) = bounded_and_not["unbounded"], bounded_and_not["bounded"]
    for rank in (0, 1):
        got, want = _records(bounded, rank), _records(unbounded, rank)
        for epoch in (1, 2):
            taken = [r for r in got if r["kind"] == "train" and r["epoch"] == epoch]
            full = [r for r in want if r["kind"] == "train" and r["epoch"] == epoch]
            assert len(taken) == 3 and len(full) == 10, (rank, epoch, len(taken), len(full))
            for b, u in zip(taken, full):      # the same samples in the same order: the sampler's shard and epoch
                assert (b["batch"], b["labels"], b["first"]) == (u["batch"], u["labels"], u["first"])
            if epoch == 1:                      # the same weights until the bounded epoch ends: the same losses
                assert [b["loss"] for b in taken] == pytest.approx([u["loss"] for u in full[:3]], rel=1e-6)
        assert [r["labels"] for r in got if r["epoch"] == 1] != [r["labels"] for r in got if r["epoch"] == 2]


@pytest.mark.parametrize("failing", ["raises", "hangs"])
def test_a_rank_that_fails_is_named_and_no_process_outlives_the_run(kit_python, data_dir, tmp_path, failing):
    kit_python("pytorch")
    env = {"RANK_RAISES": "1"} if failing == "raises" else {"RANK_HANGS": "1"}
    result, out = _run(tmp_path, data_dir, BOUNDED, env, timeout_s=45 if failing == "hangs" else None)
    failure = result["failure"]
    print(f"\n{failure['message']}")
    if failing == "raises":
        assert failure["message"] == "rank 1 raised ValueError: rank 1's own bug, in ddp_ranks.py, line 56"
    else:
        assert failure["kind"] == "timeout"
        assert failure["message"].startswith("rank 1 had not ended after 45 s: it is in train (")
        assert "called from ddp_ranks.py line 58; 1 other process(es) wait for it" in failure["message"]
        assert any("ddp_ranks.py" in line for line in failure["log_tail"])     # its stack
    assert not _still_running(out)


def test_ranks_that_never_step_say_so(kit_python, data_dir, tmp_path):
    kit_python("pytorch")
    result, out = _run(tmp_path, data_dir, BOUNDED, {"RANKS_NEVER_STEP": "1"})
    assert result["failure"]["message"] == ("no training step observed in the script's process or the 2 it started "
                                            "(no optimizer step ran)")


def test_a_process_the_probe_cannot_attach_to_fails_the_run_saying_why(kit_python, data_dir, tmp_path):
    """A new process of the script whose probe cannot start (here: its requirements were never installed) leaves a
    failure that names it and why, instead of running unobserved; the process itself goes on."""
    python = kit_python("pytorch")
    parsed = cli.parse(["--script", f"pytorch={SCRIPTS / 'ddp_ranks.py'} 0", "--frameworks", "pytorch", "--backend",
                        "local", "--profile", "quick", "--data-dir", str(data_dir), "--state-dir", str(tmp_path)])
    (planned,) = compose.build(parsed).specs
    spec = planned.to_dict()
    spec["script"]["requirements"] = {"file": "requirements.txt", "sha256": "0" * 64, "in_lock": [],
                                      "install": ["tqdm==4.67.1 --hash=sha256:" + "1" * 64]}
    folder = tmp_path / "processes"
    folder.mkdir()
    session = {"spec": spec, "data_dir": str(data_dir), "work": str(tmp_path), "folder": str(folder),
               "requirements": str(tmp_path / "never-installed"), "owner": os.getpid(),
               "deadline": time.time() + 120, "certify": None}
    (folder / "session.json").write_text(json.dumps(session))
    env = {**os.environ, follow.SESSION_ENV: str(folder / "session.json"),
           "PYTHONPATH": os.pathsep.join([str(follow.SITE), str(REPO)]), "RANK": "1"}
    done = subprocess.run([str(python), "-c", "print('the process ran')"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout == "the process ran\n", done.stderr
    (left,) = [p for p in folder.glob("*.json") if p.name != "session.json"]
    failure = gather.failed([json.loads(left.read_text())])
    assert failure is not None and failure["message"] == (
        f"rank 1 could not be watched: the probe failed to attach there: DataError: the requirements of ddp_ranks.py "
        f"are not installed in {tmp_path / 'never-installed'}: the host installs them once, before any run; run the "
        f"command again")


# -- the rules, on recorded results and stacks ------------------------------------------------------------------

def _recorded(role: str, index: int, batch: int = 16, steps: int = 3, failure: dict | None = None) -> dict:
    return {"status": "failed" if failure else "ok", "failure": failure,
            "effective": {"batch_size": {"configured": batch, "min": batch, "max": batch}, "test_samples": 0,
                          "train_steps_per_epoch": [steps], "train_samples_per_epoch": [steps * batch]},
            "timing": {"samples_per_s": 100.0, "step_s": {"p50": 0.1}}, "memory": {"peak_bytes": 2**30},
            "environment": {"device": "cpu"}, "probe": {"ended": "bounded", "shims": []},
            "process": {"role": role, "index": index, "pid": 100 + index, "backend": "gloo", "replicas": None}}


def test_the_words_and_totals_of_ranks_workers_and_replicas():
    ranks = gather.gather(None, [_recorded("rank", 1), _recorded("rank", 0)], True)
    assert ranks["processes"]["seen"] == "2 ranks" and ranks["processes"]["each"][0]["who"] == "rank 0"
    assert ranks["processes"]["total"]["global_batch"] == 32
    assert ranks["processes"]["total"]["memory"]["host_peak_bytes"] == 2 * 2**30
    workers = gather.gather(None, [_recorded("worker", k) for k in (1, 2, 3)], True)
    assert workers["processes"]["seen"] == "3 workers" and workers["processes"]["total"]["global_batch"] is None
    one = _recorded("process", 0, batch=128) | {"process": {"role": "process", "index": 0, "replicas": 2}}
    mirrored = gather.gather(one, [], True)
    assert mirrored["processes"]["seen"] == "1 process, 2 replicas"
    assert mirrored["processes"]["total"]["per_replica_batch"] == 64
    assert "processes" not in gather.gather(_recorded("process", 0) | {"process": {"role": "process"}}, [], True)


def test_the_earliest_failure_is_the_runs():
    late = _recorded("rank", 0, failure={"kind": "error", "message": "raised RuntimeError: Connection closed by peer",
                                         "at": 20.0})
    first = _recorded("rank", 1, failure={"kind": "error", "message": "raised ValueError: its own bug", "at": 10.0})
    assert gather.failed([late, first])["message"] == "rank 1 raised ValueError: its own bug"


def test_who_hangs_is_the_process_not_waiting_in_a_collective(tmp_path):
    script = str(tmp_path / "work")
    waiting = ('Timeout (0:00:25)!\nThread 0x0000000000000001 (most recent call first):\n'
               '  File "/site/torch/nn/parallel/distributed.py", line 1776 in _pre_forward\n'
               f'  File "{script}/train.py", line 25 in train\n')
    sleeping = ('Timeout (0:00:25)!\nThread 0x0000000000000002 (most recent call first):\n'
                f'  File "{script}/train.py", line 21 in train\n')
    for pid, text, index, thread in ((11, waiting, 0, 1), (12, sleeping, 1, 2)):
        (tmp_path / f"{pid}{hang.STACK}").write_text(text)
        (tmp_path / f"{pid}{hang.WHO}").write_text(json.dumps({"role": "rank", "index": index, "thread": thread}))
    found = hang.explain(tmp_path, script, 60)
    assert found["message"] == (f"rank 1 had not ended after 60 s: it is in train ({script}/train.py, line 21), "
                                f"called from train.py line 21; 1 other process(es) wait for it in a collective or a "
                                f"join; its stack is below, and every process of the run was stopped")


def test_ctrl_c_of_a_command_whose_script_runs_ranks_ends_every_rank(kit_python, data_dir, tmp_path):
    """Ctrl-C while a script's two ranks train (one of them stuck, the other waiting for it in the all-reduce): the
    command ends with 130 within 10 s, and neither rank nor the run's process outlives it."""
    kit_python("pytorch")
    state = tmp_path / "state"
    cmd = [sys.executable, "-m", "reprokit", "reproduce", "--script", f"pytorch={SCRIPTS / 'ddp_ranks.py'} "
           f"{_free_port()}", "--frameworks", "pytorch", "--backend", "local", "--profile", "quick", "--no-certify",
           "--repeats", "1", "--data-dir", str(data_dir), "--state-dir", str(state), "--reports-dir",
           str(tmp_path / "reports")]
    log = tmp_path / "out.log"

    def ranks_started() -> list[int]:
        pids = [int(m.name.removesuffix(".started")) for m in state.rglob("processes/*.started")]
        return pids if len(pids) >= 2 else []
    with sm.ended_at_exit(sm.start(cmd, log, RANK_HANGS="1", REPROKIT_BOUND_LOG=str(tmp_path / "records.jsonl"),
                                   OMP_NUM_THREADS="1")) as proc:
        ranks = sm.wait_for(ranks_started, timeout=180)
        kits = list(sm.kit_processes(state))
        os.kill(proc.pid, signal.SIGINT)
        out = sm.output(proc, log, timeout=10)
    assert proc.returncode == 130, out[-2000:]
    assert sm.wait_for(lambda: all(sm.gone(p) for p in ranks + kits), timeout=5), \
        f"still running: {[p for p in ranks + kits if not sm.gone(p)]}"

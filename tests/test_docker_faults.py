"""Faults around a Docker run, against the real engine: users' code that takes too much, an engine that dies or
restarts mid-run, a second Ctrl-C; and every container of a real matrix, inspected by the engine.

The probe runs use the stand-in kit and image of tests/test_docker_runner.py (its fixtures are reused). A fork
bomb really forks; dockerd is really stopped (a signal to the pid in /var/run/docker.pid) and started again by
scripts/start-dockerd, always, in a finally: the Docker tests after these need it. Processes are listed from the
host's /proc, independently of the engine.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import test_docker_runner as tdr
from test_docker_runner import (
    REPO,
    RUN_PREFIX,
    _extra_ca_path,
    _unavailable,
    assert_removed,
    make_spec,
    probe_call,
)

from reprokit.errors import UserError
from reprokit.runners import base, container_limits, live
from reprokit.runners import container_mounts as cm
from reprokit.runners import docker as dr

DOCKER_PID = Path("/var/run/docker.pid")
READY = 'REPROKIT-PROGRESS {"ready": true}'      # a long run's first line: its signal handlers are in place

# test_docker_runner.py's fixtures, as they are: the engine, the stand-in kit and its image
client, test_base, probe_lock, probe_kits, dirs, make_runner = (
    tdr.client, tdr.test_base, tdr.probe_lock, tdr.probe_kits, tdr.dirs, tdr.make_runner)

# Forks in a loop, every child too. A process that is refused (the pids limit: EAGAIN) says so and waits, so the
# bomb holds at the limit instead of spinning the shared CPUs on failing forks.
BOMB = r'''
import os, time
while True:
    try:
        os.fork()
    except OSError as exc:
        print(f"fork refused: {exc.strerror}", flush=True)
        time.sleep(3600)
'''

# Sleeps until stopped, and ends at once on SIGTERM as a script with a handler does (a kit that is its container's
# PID 1 has no default action for it, and a stopping dockerd would wait 10 s before its SIGKILL).
SLEEPER = r'''
import signal, sys, time
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
print(READY, flush=True)
time.sleep(300)
'''.replace("READY", repr(READY))

pytestmark = pytest.mark.alone


# ---------------------------------------------------------------------------
# Helpers: a runner whose log is kept, processes from /proc, the engine's events

@pytest.fixture
def said() -> list[str]:
    return []


@pytest.fixture
def runner_for(client, test_base, probe_lock, probe_kits, dirs, said) -> Callable[..., dr.DockerRunner]:
    """A probe runner as make_runner's, with its kit folder and options the test's, its lines kept in said."""
    def make(kits: Path | None = None, **kw: Any) -> dr.DockerRunner:
        runner = dr.DockerRunner(REPO, dirs["data"], gpus="none", kits_dir=kits or probe_kits, base_override=test_base,
                                 lock_overrides={"tensorflow": probe_lock}, extra_ca=_extra_ca_path(), client=client,
                                 log=said.append, **kw)
        runner.prepare({"tensorflow"})
        return runner
    return make


def _processes(container_id: str) -> tuple[list[int], list[int]]:
    """(host pids in the container's cgroup, pids of its containerd shim), zombies left out: from /proc."""
    inside, shims = [], []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cgroup = Path(f"/proc/{entry}/cgroup").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue                     # it ended while we looked
        if container_id in cgroup:
            inside.append(int(entry))
        elif container_id.encode() in cmdline and any(b"containerd-shim" in part for part in cmdline):
            shims.append(int(entry))
    return inside, shims


def _tasks(pids: list[int]) -> int:
    """Threads of those processes: what the pids cgroup counts."""
    n = 0
    for pid in pids:
        try:
            n += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return n


def _wait_for(what: str, ok: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = ok()
        if got:
            return got
        time.sleep(0.05)
    pytest.fail(f"{what} did not happen within {timeout:.0f} s")


def _running(client, run_id: str) -> list:
    return client.containers.list(filters={"label": f"{dr.LABEL_RUN}={run_id}", "status": "running"})


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:    # noqa: BLE001 - handed to the test, which checks it
            box["error"] = exc
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def _rid(what: str) -> str:
    return f"{RUN_PREFIX}{what}{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------
# Least privilege: the limits, a fork bomb, the second Ctrl-C

def test_memory_limit_option_is_understood_or_refused_in_one_sentence():
    gib = 1 << 30
    assert container_limits.memory_option("16g").size == 16 * gib
    assert container_limits.memory_option("512M").size == 512 << 20
    assert container_limits.memory_option("1.5GiB").size == int(1.5 * gib)
    assert container_limits.memory_option("none").bytes_for(64 * gib) is None
    auto = container_limits.memory_option("auto")
    assert auto.bytes_for(64 * gib) == 48 * gib and auto.describe(64 * gib) == "auto: 75% of the engine host's 64.0 GiB"
    for bad, why in (("16", "not understood"), ("lots", "not understood"), ("-2g", "not understood"),
                     ("1m", "below the 6 MiB")):
        with pytest.raises(UserError, match=why) as err:
            container_limits.memory_option(bad)
        message = str(err.value)
        assert message.startswith(f"--memory-limit {bad}") and message.endswith(".") and ". " not in message


def test_a_bad_memory_limit_stops_the_command_before_anything_runs(tiny_dir, tmp_path):
    done = subprocess.run([sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(tiny_dir), "--only",
                           "tiny", "--backend", "local", "--memory-limit", "16", "--dry-run", "--state-dir",
                           str(tmp_path / "state"), "--reports-dir", str(tmp_path / "reports"), "--data-dir",
                           str(tmp_path / "data")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == ("error: --memory-limit 16 is not understood; use auto, none, or "
                                                    "a size with its unit such as 16g or 512m.")


@pytest.mark.docker
def test_limits_reach_the_engine_and_the_result(runner_for, tmp_path, client):
    """auto is three quarters of the engine host's memory, a SIZE is that size, none is none; each run records its
    limits. From the engine's own inspect of each run's container, taken while it runs."""
    host_total = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]) * 1024
    for option, memory in (("auto", int(host_total * 0.75)), ("512m", 512 << 20), ("none", 0)):
        runner = runner_for(mem_limit=option)
        spec, spec_path = make_spec(tmp_path, {"wait_for": f"go-{option}"})
        call = probe_call(runner, spec, spec_path)
        thread, box = _in_thread(lambda call=call, runner=runner: runner.run(call, lambda e: None))
        (container,) = _wait_for("the run's container", lambda spec=spec: _running(client, spec["run_id"]))
        host = client.api.inspect_container(container.id)["HostConfig"]
        (runner.data_dir / f"go-{option}").write_text("")
        thread.join(60)
        outcome = box["value"]
        result = base.collect(spec, outcome, call.output / base.RESULT_NAME)
        assert outcome.exit_code == 0 and result["launcher"]["container"] == outcome.launcher["container"]
        assert host["PidsLimit"] == container_limits.PIDS_LIMIT
        assert host["Memory"] == memory and host["MemorySwap"] == (memory or 0), option
        facts = result["launcher"]["container"]
        assert facts["pids_limit"] == container_limits.PIDS_LIMIT and facts["memory_bytes"] == (memory or None)
        assert facts["memory_limit"] == {"auto": "auto: 75% of the engine host's "
                                                 f"{container_limits.gib(host_total)}"}.get(option, option)
        assert_removed(client, spec["run_id"])


@pytest.fixture(scope="module")
def fault_kits(tmp_path_factory) -> Path:
    """A kit folder of this module's own entry points: reprokit.kits.bomb, reprokit.kits.sleeper."""
    kits = tmp_path_factory.mktemp("fault-repo") / "kits"
    kits.mkdir()
    files = {"__init__.py": "", "bomb.py": BOMB, "sleeper.py": SLEEPER}
    for name, text in files.items():
        (kits / name).write_text(text)
        (kits / name).chmod(0o644)
    for p in (kits.parent, kits):
        p.chmod(0o755)
    return kits


@pytest.mark.docker
def test_a_fork_bomb_ends_as_a_failed_run_and_the_host_keeps_answering(runner_for, fault_kits, tmp_path, client):
    runner = runner_for(fault_kits)                 # the default limits: auto memory, PIDS_LIMIT processes
    run_id = _rid("bomb")
    timeout_s = 25              # room to reach the limit on a loaded 2-core CI host (it took over 7 s there once)
    call = base.KitCall("tensorflow", "reprokit.kits.bomb", (), output=tmp_path / "out", timeout_s=timeout_s, label=run_id)
    t0 = time.monotonic()
    thread, box = _in_thread(lambda: runner.run(call, lambda e: None))
    (container,) = _wait_for("the bomb's container", lambda: _running(client, run_id))
    # it fills its process table up to the limit, and no further
    full = _wait_for("the bomb reaching the pids limit",
                     lambda: (n := len(_processes(container.id)[0])) >= container_limits.PIDS_LIMIT and n,
                     timeout=timeout_s - 3)
    assert full == container_limits.PIDS_LIMIT
    # the host still starts processes, and the engine still answers
    assert subprocess.run(["true"], timeout=10).returncode == 0
    assert client.ping()
    thread.join(timeout_s + 60)
    outcome = box["value"]
    took = time.monotonic() - t0
    spec, _ = make_spec(tmp_path, {}, run_id=run_id, timeout_s=timeout_s)
    result = base.collect(spec, outcome, call.output / base.RESULT_NAME)
    assert result["status"] == "failed" and result["failure"]["kind"] == "timeout"
    assert took < timeout_s + 30, f"the bomb's run took {took:.0f} s against its {timeout_s} s limit"
    assert any("fork refused: Resource temporarily unavailable" in line for line in outcome.log_tail)
    assert result["launcher"]["container"]["pids_limit"] == container_limits.PIDS_LIMIT
    assert _processes(container.id) == ([], []), "processes of the fork bomb were left behind"
    assert_removed(client, run_id)
    print(f"fork bomb: held at {full} processes, ended as a timeout after {took:.1f} s")


@pytest.mark.docker
def test_a_second_ctrl_c_removes_the_running_container_at_once(make_runner, tmp_path, client):
    """What the second Ctrl-C calls (live.stop_all) force-removes the container of the run in flight."""
    runner = make_runner()
    spec, spec_path = make_spec(tmp_path, {"sleep": 120})
    thread, box = _in_thread(lambda: runner.run(probe_call(runner, spec, spec_path), lambda e: None))
    (container,) = _wait_for("the run's container", lambda: _running(client, spec["run_id"]))
    t0 = time.perf_counter()
    stopped = live.stop_all()
    took = time.perf_counter() - t0
    assert stopped == [container.name]
    assert_removed(client, spec["run_id"])                  # gone when stop_all returns
    assert _processes(container.id) == ([], [])
    thread.join(30)
    assert "error" not in box, box.get("error")           # the run itself ends without a traceback
    assert box["value"].exit_code == 137 and live.stop_all() == []
    print(f"second Ctrl-C: container removed in {took:.2f} s")


# ---------------------------------------------------------------------------
# An engine that dies or restarts mid-run

def _dockerd_pid() -> int:
    if os.getuid() != 0 or not DOCKER_PID.is_file():
        _unavailable("stopping and starting dockerd needs root and the engine's pid file /var/run/docker.pid")
    pid = int(DOCKER_PID.read_text())
    if Path(f"/proc/{pid}/comm").read_text().strip() != "dockerd":
        _unavailable(f"{DOCKER_PID} names pid {pid}, which is not dockerd")
    return pid


def _gone(pid: int) -> bool:
    """Ended (a zombie included: its parent reaps it, not us)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _answers(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - any failure to answer
        return False


def _start_engine(old_pid: int) -> None:
    _wait_for(f"the stopped dockerd (pid {old_pid}) exiting", lambda: _gone(old_pid), timeout=60)
    done = subprocess.run([str(REPO / "scripts" / "start-dockerd")], timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _to_ourselves(client, timeout: float = 120) -> None:
    """The engine is shared (other people's tests on this machine): wait until only ours run before stopping it."""
    deadline = time.monotonic() + timeout
    while client.containers.list(filters={"status": "running"}):
        if time.monotonic() > deadline:
            pytest.skip("other containers keep running on this engine; stopping it would break them")
        time.sleep(1)


@contextmanager
def engine_stops(client, how: signal.Signals) -> Iterator[Callable[[], None]]:
    """Stops dockerd with a signal now; yields what starts it again; starts it in any case at the end, then
    checks that the image store survived and that no container or shim of these tests is left."""
    images_before = {i.id for i in client.images.list()}
    pid = _dockerd_pid()
    os.kill(pid, how)
    try:
        yield lambda: _start_engine(pid)
    finally:
        if not _answers(client):
            _start_engine(pid)
        leftovers = client.containers.list(all=True, filters={"label": dr.LABEL})
        mine = [c for c in leftovers if c.labels.get(dr.LABEL_RUN, "").startswith(RUN_PREFIX)]
        for c in mine:
            c.remove(force=True)
        for c in mine:
            for p in _processes(c.id)[1]:
                os.kill(p, signal.SIGKILL)
    assert images_before <= {i.id for i in client.images.list()}, "images were lost with the engine"


def _long_run(runner: dr.DockerRunner, tmp_path: Path, client,
              module: str = "reprokit.kits.run") -> tuple[dict, Any, threading.Thread, dict, Any]:
    """A run that sleeps until it is stopped, started in a thread once its first line says it is ready: the probe
    kit's, or another entry point's."""
    spec, spec_path = make_spec(tmp_path, {"stdout": [READY], "sleep": 300})
    call = probe_call(runner, spec, spec_path)
    if module != "reprokit.kits.run":
        call = base.KitCall("tensorflow", module, (), output=call.output, timeout_s=300, label=spec["run_id"])
    events: list[dict] = []
    thread, box = _in_thread(lambda: runner.run(call, events.append))
    _wait_for("the run saying it is ready", lambda: {"ready": True} in events)
    (container,) = _running(client, spec["run_id"])
    _wait_for("its shim", lambda: _processes(container.id)[1])
    return spec, call, thread, box, container


def _quick_run(runner: dr.DockerRunner, tmp_path: Path) -> base.Outcome:
    """A probe run that prints one line and exits 0 (the result file's content is not what these tests check)."""
    spec, spec_path = make_spec(tmp_path, {"stdout": ["the probe ran"]})
    return runner.run(probe_call(runner, spec, spec_path), lambda e: None)


def _ran(outcome: base.Outcome) -> bool:
    return outcome.exit_code == 0 and outcome.engine_lost is None and "the probe ran" in outcome.log_tail


@pytest.mark.docker
def test_an_engine_killed_mid_run_is_engine_lost_then_the_matrix_waits_for_it(runner_for, said, tmp_path, client):
    runner = runner_for()
    assert _ran(_quick_run(runner, tmp_path))                    # one run finished before the engine dies
    _to_ourselves(client)
    spec, call, thread, box, container = _long_run(runner, tmp_path, client)
    with engine_stops(client, signal.SIGKILL) as start_engine:
        thread.join(30)
        assert not thread.is_alive(), "the run in flight did not end when the engine died"
        assert "error" not in box, box.get("error")
        lost = base.collect(spec, box["value"], call.output / base.RESULT_NAME)
        assert lost["status"] == "failed" and lost["failure"]["kind"] == "engine-lost"
        assert lost["failure"]["message"].startswith("the Docker engine stopped answering during the run")
        assert (f"its container {container.name} is left over until the engine answers again, when the next run "
                f"removes it (or `docker rm -f {container.name}`)") in lost["failure"]["message"]

        # the engine stays down longer than the bound: one sentence, and the command stops
        runner.engine_wait_s = 2
        with pytest.raises(UserError) as err:
            _quick_run(runner, tmp_path)
        message = str(err.value)
        assert message.startswith("the Docker engine stopped answering and did not come back within 2 s; "
                                  "the results of the 1 run(s) this command finished are kept; start it")
        assert "run the same command again" in message and f"`docker rm -f {container.name}`" in message
        assert message.endswith(".") and ". " not in message
        assert said.count("the Docker engine does not answer; waiting up to 2 s for it to come back ...") == 1

        # it comes back within the bound: the next run waits for it, says so once, removes what was lost, goes on
        runner.engine_wait_s = 60
        waiting = "the Docker engine does not answer; waiting up to 60 s for it to come back ..."
        thread, box = _in_thread(lambda: _quick_run(runner, tmp_path))
        _wait_for("the next run waiting for the engine", lambda: waiting in said)
        start_engine()
        thread.join(60)
        assert "error" not in box, box.get("error")
        assert _ran(box["value"])
        assert said.count(waiting) == 1 and "the Docker engine answers again; the runs go on." in said
        assert_removed(client, spec["run_id"])
        assert _processes(container.id) == ([], []), "the lost run's processes or shim were left behind"


@pytest.mark.docker
def test_an_engine_that_shuts_down_mid_run_is_engine_lost(runner_for, fault_kits, tmp_path, client):
    """A restart (SIGTERM): dockerd stops its containers first, so the run ends with an exit status, then the
    engine goes away; that is the engine's doing, not the kit's."""
    runner = runner_for(fault_kits)
    _to_ourselves(client)
    spec, call, thread, box, container = _long_run(runner, tmp_path, client, "reprokit.kits.sleeper")
    with engine_stops(client, signal.SIGTERM) as start_engine:
        thread.join(60)
        assert not thread.is_alive() and "error" not in box, box.get("error")
        lost = base.collect(spec, box["value"], call.output / base.RESULT_NAME)
        assert lost["failure"]["kind"] == "engine-lost", lost["failure"]
        assert lost["failure"]["message"].startswith("the Docker engine stopped the run as it shut down "
                                                     "(exit status 143)")
        _wait_for("dockerd closing its API", lambda: not _answers(client))
        start_engine()
        assert runner.run(base.KitCall("tensorflow", "reprokit.kits.sleeper", (), output=tmp_path / "next", timeout_s=1,
                                       label=f"{RUN_PREFIX}next"), lambda e: None).timed_out   # it runs again
        assert_removed(client, spec["run_id"])
        assert _processes(container.id) == ([], [])


# ---------------------------------------------------------------------------
# Every container of a real matrix, inspected by the engine as it is created

class Inspected:
    """The engine's inspect of each reprokit container created while the block runs, taken at its create event
    (before it starts, long before it is removed), and the task count of each, sampled from /proc while it runs."""

    def __init__(self, client) -> None:
        self.client = client
        self.attrs: dict[str, dict] = {}
        self.missed: list[str] = []
        self.peak_tasks: dict[str, int] = {}
        self._done = threading.Event()

    def __enter__(self) -> Inspected:
        self._events = self.client.events(decode=True, filters={"type": "container", "event": "create",
                                                                "label": f"{dr.LABEL}=1"})
        self._threads = [threading.Thread(target=self._watch, daemon=True),
                         threading.Thread(target=self._sample, daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._events.close()
        for t in self._threads:
            t.join(10)

    def _watch(self) -> None:
        import docker.errors
        try:
            for event in self._events:
                if dr.LABEL_RUN not in event.get("Actor", {}).get("Attributes", {}):
                    continue        # a step of an image build that ran meanwhile: its image carries the label
                try:
                    self.attrs[event["id"]] = self.client.api.inspect_container(event["id"])
                except docker.errors.NotFound:
                    self.missed.append(event["id"])
        except Exception:  # noqa: BLE001, S110 - the stream is closed at the end
            pass

    def _sample(self) -> None:
        while not self._done.wait(0.5):
            for cid in list(self.attrs):
                n = _tasks(_processes(cid)[0])
                self.peak_tasks[cid] = max(n, self.peak_tasks.get(cid, 0))


def check_least_privilege(attrs: dict, *, memory: int, allowed_ro: dict[str, Path], inputs_under: Path,
                          results_under: Path) -> None:
    """One container: non-root, no capabilities, no new privileges, no network, a read-only root, the limits;
    exactly the declared mounts, writable only where declared (the results folder; the JIT cache on a PTX-only
    GPU, which this CPU matrix has not)."""
    host, config = attrs["HostConfig"], attrs["Config"]
    uid = config["User"].split(":")[0]
    assert uid and uid not in ("0", "root"), config["User"]
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert "no-new-privileges" in host["SecurityOpt"] and host["Privileged"] is False
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True and set(host["Tmpfs"]) == {"/tmp"}
    assert host["PidsLimit"] == container_limits.PIDS_LIMIT
    assert host["Memory"] == memory and host["MemorySwap"] == memory
    assert not host.get("Binds") and not host.get("Devices") and not host.get("DeviceRequests")
    writable = []
    for m in attrs["Mounts"]:
        target, source = m["Destination"], Path(m["Source"])
        assert m["Type"] == "bind", m
        if m["RW"]:
            writable.append(target)
        if target in allowed_ro:
            assert source == allowed_ro[target] and not m["RW"], m
        elif target.startswith(cm.INPUTS_TARGET + "/"):
            assert source.is_relative_to(inputs_under) and not m["RW"], m
        elif target == cm.RESULTS_TARGET:
            assert source.is_relative_to(results_under), m
        else:
            pytest.fail(f"a mount that was not declared: {m}")
    assert writable == [cm.RESULTS_TARGET], writable


@pytest.mark.docker
@pytest.mark.slow
def test_every_container_of_a_real_matrix_runs_with_least_privilege(client, test_base, tiny_dir, tmp_path):
    """`reprokit reproduce --backend docker` on the tiny experiment in the TensorFlow CPU image (the one
    test_docker_runner.py's end-to-end test uses; CI builds no PyTorch image), watched through the engine's
    events: every container it starts is inspected, and none is left."""
    for needed in ("reprokit/kits/run.py", "locks/tensorflow-cpu.txt"):
        if not (REPO / needed).is_file():
            _unavailable(f"{needed} does not exist yet")
    state, reports, data = tmp_path / "state", tmp_path / "reports", tmp_path / "data"
    env = {**os.environ, "REPROKIT_BASE_OVERRIDE": test_base}
    if _extra_ca_path():
        env["REPROKIT_EXTRA_CA"] = str(_extra_ca_path())
    cmd = [sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(tiny_dir), "--only", "tiny",
           "--backend", "docker", "--gpus", "none", "--frameworks", "tensorflow", "--no-certify", "--offline",
           "--variants", "fixed", "--state-dir", str(state), "--reports-dir", str(reports), "--data-dir", str(data),
           "--name", "t"]
    with Inspected(client) as seen:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not seen.missed, f"containers removed before they could be inspected: {seen.missed}"
    assert seen.attrs, "the matrix started no container"
    host_total = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]) * 1024
    memory = int(host_total * container_limits.AUTO_SHARE)
    for attrs in seen.attrs.values():
        check_least_privilege(attrs, memory=memory, inputs_under=state, results_under=state,
                              allowed_ro={cm.KITS_TARGET: REPO / "reprokit" / "kits", cm.DATA_TARGET: data.resolve(),
                                          "/opt/reprokit/user/0": tiny_dir.resolve()})
    assert not [c for c in client.containers.list(all=True) if c.id in seen.attrs], "containers were left behind"
    results = [json.loads(p.read_text()) for p in sorted((reports / "t" / "results").glob("*.json"))]
    assert results and all(r["status"] == "ok" for r in results)
    for r in results:
        facts = r["launcher"]["container"]
        assert facts["pids_limit"] == container_limits.PIDS_LIMIT and facts["memory_bytes"] == memory
        assert facts["memory_limit"] == f"auto: 75% of the engine host's {container_limits.gib(host_total)}"
    peak = max(seen.peak_tasks.values(), default=0)
    assert 0 < peak < container_limits.PIDS_LIMIT
    modules = sorted(a["Config"]["Cmd"][2] for a in seen.attrs.values())
    print(f"real matrix: {len(seen.attrs)} containers inspected ({', '.join(modules)}); at most {peak} tasks in "
          f"one (limit {container_limits.PIDS_LIMIT}), memory limit {container_limits.gib(memory)}")

"""The Docker runner and the images, against a real Docker engine.

Every fault of issue 3 is produced by a real container: a sleeping kit for the
timeout, a memory hog under a memory limit for OOMKilled, garbage for invalid
output. The container's settings are proven from the engine's own inspect data
(and, where it matters, from inside the container). The lifecycle tests run a
stand-in kit (``reprokit/kits/run.py`` written below, mounted read-only exactly like the
real one) in an image built from the project's own Dockerfile with an empty
lock file, so they need no framework and no network. One test builds the real
TensorFlow CPU image and runs the real kit end to end.

Where no engine answers these tests are skipped with the reason, unless
REPROKIT_REQUIRE_DOCKER=1 (CI), where they fail instead.
Knobs: REPROKIT_TEST_BASE_IMAGE (the local stand-in for the pinned base, built
by scripts/build-test-base-image), REPROKIT_EXTRA_CA (CA bundle for pip behind
a TLS-re-signing proxy; default: the system bundle where there is one).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from reprokit.environments import base_images, docker_client, host_checks, images
from reprokit.environments.envs import ENVS
from reprokit.errors import UserError
from reprokit.execute import data_step
from reprokit.kits.contract import result_header
from reprokit.results import results
from reprokit.runners import base, choose
from reprokit.runners import container_mounts as cm
from reprokit.runners import docker as dr
from reprokit.runners.local import LocalRunner

REPO = Path(__file__).resolve().parents[1]
REQUIRE = os.environ.get("REPROKIT_REQUIRE_DOCKER") == "1"
TEST_BASE = os.environ.get("REPROKIT_TEST_BASE_IMAGE", "reprokit/test-base:bookworm-py311")
RUN_PREFIX = "7e57"          # run ids of this module, so its leftovers can be found


def _unavailable(reason: str):
    if REQUIRE:
        pytest.fail(f"REPROKIT_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


def _run_id() -> str:
    return RUN_PREFIX + uuid.uuid4().hex[:12]


def _extra_ca_path() -> str | None:
    path = os.environ.get(images.EXTRA_CA_ENV) or "/etc/ssl/certs/ca-certificates.crt"
    return path if Path(path).is_file() else None


# ---------------------------------------------------------------------------
# The stand-in kit: does what the spec's "probe" section says.

PROBE_KIT = r'''
import argparse, json, os, resource, socket, sys, time
p = argparse.ArgumentParser()
p.add_argument("--spec"); p.add_argument("--out"); p.add_argument("--data-dir")
a = p.parse_args()
spec = json.load(open(a.spec))
probe = spec["probe"]
for line in probe.get("stdout", []):
    print(line)
for line in probe.get("stderr", []):
    print(line, file=sys.stderr)
if probe.get("facts"):
    def tries(fn):
        try:
            fn(); return "ok"
        except OSError as exc:
            return exc.strerror or str(exc)
    def write(path):
        return tries(lambda: open(path, "w").write("x"))
    def connect():
        s = socket.socket(); s.settimeout(2); s.connect(("1.1.1.1", 53))
    status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
    facts = {
        "uid": os.getuid(), "gid": os.getgid(),
        "cap_eff": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
        "write_kits": write("/opt/reprokit/reprokit/kits/x"), "write_data": write(a.data_dir + "/x"),
        "write_root": write("/x"), "write_user": write("/opt/reprokit/user/x"),
        "write_results": write(os.path.dirname(a.out) + "/probe"), "write_tmp": write("/tmp/x"),
        "connect": tries(connect), "interfaces": sorted(os.listdir("/sys/class/net")),
        "docker_sock": os.path.exists("/var/run/docker.sock") or os.path.exists("/run/docker.sock"),
        "shm_bytes": os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize,
        "stack": resource.getrlimit(resource.RLIMIT_STACK)[0],
        "pythonpath": os.environ.get("PYTHONPATH"),
        "data_files": sorted(os.listdir(a.data_dir)),
    }
    print("REPROKIT-PROGRESS " + json.dumps({"facts": facts}), flush=True)
if probe.get("wait_for"):
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(a.data_dir, probe["wait_for"])) and time.time() < deadline:
        time.sleep(0.05)
if probe.get("sleep"):
    time.sleep(probe["sleep"])
for line in probe.get("after_sleep", []):
    print(line, flush=True)
if probe.get("hog"):
    hog = []
    while True:
        hog.append(bytearray(32 << 20))
if "write" in probe:
    w = probe["write"]
    with open(a.out, "w") as fh:
        fh.write(w if isinstance(w, str) else json.dumps(w))
sys.exit(probe.get("exit", 0))
'''


# A second entry point: copies --in to --out and says whether it could also write to --in.
CHAIN_KIT = r'''
import argparse, json
p = argparse.ArgumentParser()
p.add_argument("--in", dest="src"); p.add_argument("--out")
a = p.parse_args()
try:
    open(a.src, "a").close()
    wrote_input = "ok"
except OSError as exc:
    wrote_input = exc.strerror
json.dump({"read": open(a.src).read(), "wrote_input": wrote_input, "src": a.src, "out": a.out}, open(a.out, "w"))
'''


def make_spec(tmp_path: Path, probe: dict, *, run_id: str | None = None, timeout_s: float = 60) -> tuple[dict, Path]:
    run_id = run_id or _run_id()
    spec = {"run_id": run_id, "experiment": "probe", "variant": "fixed", "framework": "tensorflow",
            "profile": "quick", "repeat": 0, "device": "cpu", "model": {}, "data": {}, "train": {},
            "numerics": {}, "limits": {"timeout_s": timeout_s}, "probe": probe}
    path = tmp_path / f"{run_id}.spec.json"
    path.write_text(json.dumps(spec))
    return spec, path


def ok_result(spec: dict) -> dict:
    """The smallest result of status ok that the schema accepts."""
    spec = {k: v for k, v in spec.items() if k != "probe"}
    return {
        "schema": result_header.SCHEMA, "run_id": spec["run_id"], "experiment": spec["experiment"],
        "variant": spec["variant"], "framework": spec["framework"], "profile": spec["profile"],
        "repeat": spec["repeat"], "status": "ok", "failure": None, "spec": spec,
        "effective": {"batch_size": {"configured": 1, "min": 1, "max": 1, "mean": 1.0},
                      "train_samples_per_epoch": [1], "train_steps_per_epoch": [1], "test_samples": 1},
        "timing": {"method": "probe", "warmup_steps": 1, "wall_s": 0.01, "epochs": [{"train_s": 0.0, "eval_s": 0.0}],
                   "step_s": {"p50": None, "p95": None, "mean": None, "n": 0, "values": []},
                   "samples_per_s": 0.0, "data_wait_fraction": 0.0},
        "memory": {"peak_bytes": None, "source": "none", "over_steps": []},
        "metrics": {"averaged_over": "samples", "epochs": []},
        "model": {"parameters": {"total": 0, "trainable": 0}},
        "environment": {"framework": "tensorflow", "framework_version": "0", "python": "3.11", "device": "cpu",
                        "device_name": "probe", "cpu_threads": 1, "host": {}},
        "provenance": {"code_commit": "x", "code_dirty": False, "code_sha256": "x", "lock_sha256": "x",
                       "data_sha256": "x", "image": "x"},
        "findings": [],
    }


# ---------------------------------------------------------------------------
# Fixtures

@pytest.fixture(scope="session")
def client():
    ok, reason = host_checks.engine_status()
    if not ok:
        _unavailable(reason)
    import docker
    c = docker.from_env(timeout=120)
    yield c
    for leftover in c.containers.list(all=True, filters={"label": dr.LABEL}):
        if leftover.labels.get(dr.LABEL_RUN, "").startswith(RUN_PREFIX):
            leftover.remove(force=True)


@pytest.fixture(scope="session")
def test_base(client):
    import docker.errors
    try:
        client.images.get(TEST_BASE)
    except docker.errors.ImageNotFound:
        if os.getuid() != 0 or shutil.which("debootstrap") is None:
            _unavailable(f"the test base image {TEST_BASE} is missing and cannot be built here "
                         f"(scripts/build-test-base-image needs root and debootstrap)")
        subprocess.run([str(REPO / "scripts" / "build-test-base-image"), TEST_BASE], check=True, timeout=900)
    return TEST_BASE


@pytest.fixture(scope="session")
def probe_lock(tmp_path_factory) -> Path:
    # Empty: the stand-in kit needs only the standard library. Its content (and
    # so the image tag) is stable, so the image is built once and cached by tag.
    path = tmp_path_factory.mktemp("locks") / "reprokit-probe.txt"
    path.write_text("")
    return path


@pytest.fixture(scope="session")
def probe_kits(tmp_path_factory) -> Path:
    kits = tmp_path_factory.mktemp("probe-repo") / "kits"
    kits.mkdir()
    (kits / "__init__.py").write_text("")
    (kits / "run.py").write_text(PROBE_KIT)
    (kits / "chain.py").write_text(CHAIN_KIT)
    for p in (kits.parent, kits, kits / "__init__.py", kits / "run.py", kits / "chain.py"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return kits


@pytest.fixture
def dirs(tmp_path) -> dict:
    d = {"data": tmp_path / "data", "results": tmp_path / "results", "user": tmp_path / "user"}
    for p in d.values():
        p.mkdir()
        p.chmod(0o755)
    (d["data"] / "dataset.npz").write_bytes(b"not really a dataset")
    (d["data"] / "dataset.npz").chmod(0o644)
    (d["user"] / "my_experiment.toml").write_text("")
    (d["user"] / "my_experiment.toml").chmod(0o644)
    tmp_path.chmod(0o755)
    return d


@pytest.fixture
def make_runner(client, test_base, probe_lock, probe_kits, dirs):
    def make(**kw) -> dr.DockerRunner:
        kw.setdefault("gpus", "none")
        kw.setdefault("client", client)
        runner = dr.DockerRunner(REPO, dirs["data"], kits_dir=probe_kits,
                                 base_override=test_base, lock_overrides={"tensorflow": probe_lock},
                                 extra_ca=_extra_ca_path(), log=lambda line: None, **kw)
        runner.prepare({"tensorflow"})
        return runner
    return make


def probe_call(runner: dr.DockerRunner, spec: dict, spec_path: Path) -> base.KitCall:
    """The training run's call, as base.run_spec makes it, with the output folder next to the spec."""
    return base.spec_call(spec, spec_path, spec_path.parent / f"{spec['run_id']}-out", runner.data_dir)


def run_probe(runner: dr.DockerRunner, tmp_path: Path, probe: dict, timeout_s: float = 60, **kw):
    spec, spec_path = make_spec(tmp_path, probe, timeout_s=timeout_s, **kw)
    call = probe_call(runner, spec, spec_path)
    events: list[dict] = []
    outcome = runner.run(call, events.append)
    return spec, outcome, base.collect(spec, outcome, call.output / base.RESULT_NAME), events


def assert_removed(client, run_id: str) -> None:
    left = client.containers.list(all=True, filters={"label": f"{dr.LABEL_RUN}={run_id}"})
    assert left == [], f"containers of run {run_id} were left behind: {left}"


# ---------------------------------------------------------------------------
# Lifecycle and faults, with real containers

@pytest.mark.docker
def test_ok_run_yields_the_kits_result_with_image_facts(make_runner, tmp_path, client):
    runner = make_runner()
    spec, _ = make_spec(tmp_path, {})
    spec, outcome, result, events = run_probe(
        runner, tmp_path, {"write": ok_result(spec), "stdout": ["REPROKIT-PROGRESS {\"step\": 1}", "plain log"]},
        run_id=spec["run_id"])
    assert outcome.exit_code == 0 and not outcome.timed_out and not outcome.oom_killed
    assert events == [{"step": 1}] and "plain log" in outcome.log_tail
    assert result["status"] == "ok" and results.problems(result) is None
    launcher = result["launcher"]
    image = client.images.get(runner.recipe("tensorflow").tag)
    assert launcher["backend"] == "docker"
    assert launcher["image"]["ref"] == runner.recipe("tensorflow").tag
    assert launcher["image"]["id"] == image.id
    assert launcher["image"]["base"] == TEST_BASE
    assert launcher["image"]["base_digest"] == client.images.get(TEST_BASE).id
    assert launcher["image"]["base_pinned"] is False
    assert runner.describe("tensorflow")["image"] == launcher["image"]["ref"]
    assert_removed(client, spec["run_id"])


@pytest.mark.docker
def test_settings_reach_the_container(make_runner, tmp_path, client, dirs):
    """Mounts, user, capabilities, network, privileges, shm, ulimits: from inspect and from inside."""
    runner = make_runner(extra_mounts=[(dirs["user"], "/opt/reprokit/user")])
    spec, spec_path = make_spec(tmp_path, {"facts": True, "wait_for": "release"})
    run_id = spec["run_id"]
    call = probe_call(runner, spec, spec_path)
    events: list[dict] = []
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(outcome=runner.run(call, events.append)))
    worker.start()
    try:
        deadline = time.time() + 30
        containers = []
        while not containers and time.time() < deadline:
            containers = client.containers.list(filters={"label": f"{dr.LABEL_RUN}={run_id}"})
            time.sleep(0.05)
        assert containers, "the run's container never showed up"
        attrs = client.api.inspect_container(containers[0].id)
    finally:
        (dirs["data"] / "release").write_text("")
        worker.join(60)
    host = attrs["HostConfig"]
    uid = 10001 if os.getuid() == 0 else os.getuid()

    assert attrs["Config"]["User"] == ("10001:10001" if os.getuid() == 0 else f"{os.getuid()}:{os.getgid()}")
    assert attrs["Config"]["Labels"][dr.LABEL] == "1" and attrs["Config"]["Labels"][dr.LABEL_RUN] == run_id
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["Privileged"] is False
    assert host["ReadonlyRootfs"] is True and "/tmp" in host["Tmpfs"]
    assert host["ShmSize"] == 1 << 30
    ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]}
    assert ulimits["stack"] == (67108864, 67108864)
    if any(n == "memlock" for n, _, _ in runner.ulimits):    # unless this engine cannot raise it
        assert ulimits["memlock"] == (-1, -1)
    else:
        assert "memlock" not in ulimits and box.get("outcome") is not None
    assert not host.get("DeviceRequests")
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    spec_target = f"{cm.INPUTS_TARGET}/0/{spec_path.name}"
    assert set(mounts) == {cm.KITS_TARGET, spec_target, cm.DATA_TARGET, cm.RESULTS_TARGET, "/opt/reprokit/user"}
    writable = [d for d, m in mounts.items() if m["RW"]]
    assert writable == [cm.RESULTS_TARGET]
    assert mounts[spec_target]["Source"] == str(spec_path) and mounts[cm.RESULTS_TARGET]["Source"] == str(call.output)
    assert attrs["Config"]["Cmd"] == ["python", "-m", "reprokit.kits.run", "--spec", spec_target,
                                      "--out", f"{cm.RESULTS_TARGET}/result.json", "--data-dir", cm.DATA_TARGET]
    assert mounts[cm.KITS_TARGET]["Source"] == str(runner.kits_dir)
    assert mounts[cm.DATA_TARGET]["Source"] == str(dirs["data"])
    assert mounts["/opt/reprokit/user"]["Source"] == str(dirs["user"])
    assert not any("docker.sock" in (m["Source"] + m["Destination"]) for m in attrs["Mounts"])
    assert not any("docker.sock" in b for b in (host.get("Binds") or []))

    outcome = box["outcome"]
    facts = next(e["facts"] for e in events if "facts" in e)
    assert facts["uid"] == uid and facts["uid"] != 0
    assert int(facts["cap_eff"], 16) == 0 and facts["no_new_privs"] == "1"
    for key in ("write_kits", "write_data", "write_root", "write_user"):
        assert facts[key] == "Read-only file system", (key, facts[key])
    assert facts["write_results"] == "ok" and facts["write_tmp"] == "ok"
    assert facts["connect"] != "ok" and facts["interfaces"] == ["lo"]
    assert facts["docker_sock"] is False
    assert facts["shm_bytes"] == 1 << 30 and facts["stack"] == 67108864
    assert facts["pythonpath"] == "/opt/reprokit:/opt/reprokit/user"
    assert "dataset.npz" in facts["data_files"]
    assert outcome.exit_code == 0
    assert_removed(client, run_id)


@pytest.mark.docker
def test_one_calls_output_is_the_next_calls_read_only_input(make_runner, tmp_path, client):
    """The certificate's data flow: the first container writes a file to its output folder, the second
    reads it from a read-only mount; each sees host paths translated to its own mounts."""
    runner = make_runner()
    source = tmp_path / "source.txt"
    source.write_text("weights")
    source.chmod(0o666)                  # writable by anyone: only the mount can stop a write
    first = base.KitCall("tensorflow", "reprokit.kits.chain", ("--in", source, "--out", tmp_path / "a" / "copy.txt"),
                         output=tmp_path / "a", inputs=(source,), timeout_s=60, label=RUN_PREFIX + "chain-a")
    second = base.KitCall("tensorflow", "reprokit.kits.chain", ("--in", first.output / "copy.txt",
                                                       "--out", tmp_path / "b" / "copy.txt"),
                          output=tmp_path / "b", inputs=(first.output / "copy.txt",), timeout_s=60,
                          label=RUN_PREFIX + "chain-b")
    assert runner.run(first, lambda e: None).exit_code == 0
    assert runner.run(second, lambda e: None).exit_code == 0
    a = json.loads((tmp_path / "a" / "copy.txt").read_text())
    b = json.loads((tmp_path / "b" / "copy.txt").read_text())
    assert a["read"] == "weights" and a["wrote_input"] == "Read-only file system"
    assert a["src"] == f"{cm.INPUTS_TARGET}/0/source.txt" and a["out"] == f"{cm.RESULTS_TARGET}/copy.txt"
    assert json.loads(b["read"]) == a and b["wrote_input"] == "Read-only file system"
    with pytest.raises(ValueError, match="in none of its mounts"):
        runner.run(base.KitCall("tensorflow", "reprokit.kits.chain", ("--in", tmp_path / "elsewhere"),
                                output=tmp_path / "c"), lambda e: None)


@pytest.mark.docker
def test_timeout_kills_and_records_a_timeout(make_runner, tmp_path, client):
    runner = make_runner()
    t0 = time.perf_counter()
    spec, outcome, result, _ = run_probe(runner, tmp_path, {"sleep": 120, "stdout": ["started"]}, timeout_s=2)
    assert time.perf_counter() - t0 < 15
    assert outcome.timed_out and outcome.exit_code is None
    assert result["status"] == "failed" and result["failure"]["kind"] == "timeout"
    assert "started" in result["failure"]["log_tail"]
    assert results.problems(result) is None
    assert_removed(client, spec["run_id"])


@pytest.mark.docker
def test_the_log_stream_outlives_a_silence_longer_than_the_clients_read_timeout(make_runner, tmp_path, client):
    """A first PTX compile or fp64 certificate parts can be silent for minutes: the followed log stream must
    not share the client's read timeout (here 2 s against 5 s of silence), or the progress and the tail stop."""
    import docker
    runner = make_runner(client=docker.from_env(timeout=2))
    spec, _ = make_spec(tmp_path, {})
    spec, outcome, result, events = run_probe(
        runner, tmp_path, {"stdout": ["REPROKIT-PROGRESS {\"step\": 1}", "before the silence"], "sleep": 5,
                           "after_sleep": ["REPROKIT-PROGRESS {\"step\": 2}", "after the silence"],
                           "write": ok_result(spec)}, run_id=spec["run_id"])
    assert outcome.exit_code == 0 and not outcome.timed_out and result["status"] == "ok"
    assert events == [{"step": 1}, {"step": 2}]
    assert outcome.log_tail[-2:] == ["before the silence", "after the silence"]
    assert_removed(client, spec["run_id"])


@pytest.mark.docker
def test_host_memory_oom_is_recorded_as_oom(make_runner, tmp_path, client):
    runner = make_runner(mem_limit="96m")
    spec, outcome, result, _ = run_probe(runner, tmp_path, {"hog": True})
    assert outcome.oom_killed and outcome.exit_code == 137
    assert result["failure"]["kind"] == "oom"
    assert results.problems(result) is None
    assert_removed(client, spec["run_id"])


@pytest.mark.docker
def test_framework_gpu_oom_is_recorded_as_gpu_oom(make_runner, tmp_path, client):
    runner = make_runner()
    spec, outcome, result, _ = run_probe(runner, tmp_path, {"exit": 1, "stderr": [
        "Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]})
    assert outcome.exit_code == 1 and not outcome.oom_killed
    assert result["failure"]["kind"] == "gpu-oom"
    assert_removed(client, spec["run_id"])


@pytest.mark.docker
def test_nonzero_exit_keeps_the_log_tail(make_runner, tmp_path, client):
    runner = make_runner()
    lines = [f"line {i} <b>|not markdown|</b>" for i in range(100)]
    spec, outcome, result, _ = run_probe(runner, tmp_path, {"exit": 3, "stderr": lines})
    assert outcome.exit_code == 3
    assert result["failure"]["kind"] == "exit-code" and "3" in result["failure"]["message"]
    assert result["failure"]["log_tail"] == lines[-base.LOG_TAIL_LINES:]
    assert_removed(client, spec["run_id"])


@pytest.mark.docker
@pytest.mark.parametrize("probe, why", [
    ({"write": "{this is not json"}, "not JSON"),
    ({}, "no result file"),
    ({"write": {"run_id": "x"}}, "does not match the schema"),
])
def test_missing_or_malformed_result_is_invalid_output(make_runner, tmp_path, client, probe, why):
    runner = make_runner()
    spec, outcome, result, _ = run_probe(runner, tmp_path, probe)
    assert outcome.exit_code == 0
    assert result["failure"]["kind"] == "invalid-output" and why in result["failure"]["message"]
    assert results.problems(result) is None
    assert_removed(client, spec["run_id"])


@pytest.mark.docker
def test_a_stale_result_file_is_never_collected(make_runner, tmp_path):
    runner = make_runner()
    spec, spec_path = make_spec(tmp_path, {})
    call = probe_call(runner, spec, spec_path)
    call.output.mkdir()
    (call.output / base.RESULT_NAME).write_text(json.dumps(ok_result(spec)))   # left by an earlier attempt
    outcome = runner.run(call, lambda e: None)
    assert base.collect(spec, outcome, call.output / base.RESULT_NAME)["failure"]["kind"] == "invalid-output"


@pytest.mark.docker
def test_the_matrix_goes_on_after_each_fault(make_runner, tmp_path, client):
    runner = make_runner(mem_limit="96m")
    kinds = []
    for probe, timeout in (({"sleep": 60}, 1.5), ({"hog": True}, 60), ({"write": "garbage"}, 60),
                           ({"exit": 2}, 60), ("ok", 60)):
        if probe == "ok":
            spec, _ = make_spec(tmp_path, {})
            probe = {"write": ok_result(spec)}
            _, _, result, _ = run_probe(runner, tmp_path, probe, timeout_s=timeout, run_id=spec["run_id"])
        else:
            _, _, result, _ = run_probe(runner, tmp_path, probe, timeout_s=timeout)
        kinds.append(result["failure"]["kind"] if result["failure"] else result["status"])
    assert kinds == ["timeout", "oom", "invalid-output", "exit-code", "ok"]
    assert [c for c in client.containers.list(all=True, filters={"label": dr.LABEL})
            if c.labels.get(dr.LABEL_RUN, "").startswith(RUN_PREFIX)] == []


@pytest.mark.docker
def test_ctrl_c_removes_the_container_and_reports_interrupted(make_runner, tmp_path, client):
    runner = make_runner()
    spec, spec_path = make_spec(tmp_path, {"sleep": 120})
    run_id = spec["run_id"]

    def interrupt_when_running():
        deadline = time.time() + 30
        while time.time() < deadline:
            if client.containers.list(filters={"label": f"{dr.LABEL_RUN}={run_id}", "status": "running"}):
                time.sleep(0.3)
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    # Python's own Ctrl-C, whatever the suite was started with (a shell's background job ignores SIGINT)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt_when_running, daemon=True).start()
    t0 = time.perf_counter()
    try:
        outcome = runner.run(probe_call(runner, spec, spec_path), lambda e: None)
    except KeyboardInterrupt:  # pragma: no cover - the runner must catch it
        pytest.fail("the runner let KeyboardInterrupt through")
    finally:
        signal.signal(signal.SIGINT, before)
    assert outcome.interrupted and time.perf_counter() - t0 < 30
    assert_removed(client, run_id)


@pytest.mark.docker
def test_engine_refusing_to_start_is_a_failed_run_not_a_crash(make_runner, tmp_path, client):
    """A GPU request that slipped past the checks: the engine refuses at start; the matrix goes on."""
    if host_checks.nvidia_runtime_available(client):
        pytest.skip("this engine has the NVIDIA runtime, so it would start the container")
    runner = make_runner()
    runner.gpus = "all"                      # bypass prepare()'s check on purpose
    spec, outcome, result, _ = run_probe(runner, tmp_path, {})
    assert outcome.exit_code == 125 and result["status"] == "failed"
    assert result["failure"]["kind"] == "error"
    assert result["failure"]["message"].startswith("the engine could not start the container: ")
    assert "could not start the container" in result["failure"]["log_tail"][-1]
    assert result["launcher"]["container"]["start_error"]
    assert results.problems(result) is None
    assert_removed(client, spec["run_id"])


# ---------------------------------------------------------------------------
# GPUs: requests reach the engine; a host without the runtime is refused first

@pytest.mark.docker
@pytest.mark.parametrize("gpus, expect", [
    ("all", {"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]]}),
    ("0,2", {"Driver": "", "Count": 0, "DeviceIDs": ["0", "2"], "Capabilities": [["gpu"]]}),
])
def test_gpu_device_requests_reach_the_engine(make_runner, tmp_path, client, gpus, expect):
    """Created, never started (no NVIDIA runtime here): the engine stores the request as given."""
    runner = make_runner()
    runner.gpus = host_checks.parse_gpus(gpus)
    spec, spec_path = make_spec(tmp_path, {})
    call = probe_call(runner, spec, spec_path)
    call.output.mkdir()
    container = client.containers.create(**runner.container_config(call, spec["run_id"]))
    try:
        requests = client.api.inspect_container(container.id)["HostConfig"]["DeviceRequests"]
        assert len(requests) == 1
        got = {k: requests[0].get(k) for k in expect}
        got["DeviceIDs"] = got["DeviceIDs"] or []          # the SDK sends [] where the CLI sends null
        assert got == expect
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_gpus_without_nvidia_runtime_fail_before_any_container(client, test_base, probe_lock, probe_kits, dirs):
    if host_checks.nvidia_runtime_available(client):
        pytest.skip("this engine has the NVIDIA runtime")
    before = {c.id for c in client.containers.list(all=True)}
    runner = dr.DockerRunner(REPO, dirs["data"], gpus="all", kits_dir=probe_kits,
                             base_override=test_base, lock_overrides={"tensorflow": probe_lock}, client=client)
    with pytest.raises(UserError) as err:
        runner.prepare({"tensorflow"})
    message = str(err.value)
    assert "no NVIDIA container runtime" in message and "nvidia-container-toolkit" in message
    assert "--gpus none" in message and message.count(";") == 1
    assert {c.id for c in client.containers.list(all=True)} == before
    # and run() without prepare() checks the same before creating anything
    spec, spec_path = make_spec(Path(dirs["results"]), {})
    with pytest.raises(UserError):
        runner.run(probe_call(runner, spec, spec_path), lambda e: None)
    assert {c.id for c in client.containers.list(all=True)} == before


# ---------------------------------------------------------------------------
# Images: the Dockerfile's properties, the CA, failures

@pytest.mark.docker
def test_image_runs_as_non_root_and_records_its_base(make_runner, client):
    runner = make_runner()
    image = client.images.get(runner.recipe("tensorflow").tag)
    assert image.attrs["Config"]["User"] == "10001:10001"
    labels = image.labels
    assert labels[images.LABEL_BASE_NAME] == TEST_BASE
    assert labels[images.LABEL_BASE_DIGEST] == client.images.get(TEST_BASE).id
    assert labels[images.LABEL_FRAMEWORK] == "tensorflow"
    env = dict(e.split("=", 1) for e in image.attrs["Config"]["Env"])
    assert env["PYTHONPATH"] == "/opt/reprokit" and env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PATH"].startswith("/opt/venv/bin:")


@pytest.mark.docker
def test_extra_ca_never_reaches_the_final_image(client, test_base, tmp_path):
    """Build with a CA bundle carrying a unique marker; scan history and every layer of the result."""
    marker = f"reprokit-ca-probe-{uuid.uuid4().hex}"
    system = Path("/etc/ssl/certs/ca-certificates.crt")
    bundle = (system.read_text() if system.is_file() else "") + f"\n# {marker}\n"
    if "BEGIN CERTIFICATE" not in bundle:
        pytest.skip("no system CA bundle to build a probe CA from")
    ca = tmp_path / "extra-ca.pem"
    ca.write_text(bundle)
    lock = tmp_path / "ca-probe.txt"
    lock.write_text(f"# {marker}\n")                   # a fresh tag: never a cached image
    r = images.recipe("tensorflow", "cpu", base_override=test_base, lock_override=lock, client=client)
    image = images.build(r, client, extra_ca=images.read_extra_ca(ca), log=lambda line: None, log_dir=tmp_path)
    try:
        history = json.dumps(image.history())
        assert marker not in history and "extra-ca" not in history and "/build/ca" not in history
        found = False
        tail = b""
        needle = marker.encode()
        for chunk in image.save(named=True):
            if needle in tail + chunk:
                found = True
                break
            tail = chunk[-len(needle):]
        assert not found, "the extra CA ended up in a layer of the final image"
        # and the builder stage, which had the CA, is not kept in the engine either
        import docker.errors
        stages = images.builder_stages((tmp_path / "build-tensorflow-cpu.log").read_text())
        assert stages
        for stage in stages:
            with pytest.raises(docker.errors.ImageNotFound):
                client.images.get(stage)
    finally:
        client.images.remove(image.id, force=True)


@pytest.mark.docker
def test_build_failure_is_one_clear_message(client, test_base, tmp_path):
    lock = tmp_path / "broken.txt"
    lock.write_text("reprokit-no-such-package-anywhere==1.0 --hash=sha256:" + "0" * 64 + "\n")
    r = images.recipe("tensorflow", "cpu", base_override=test_base, lock_override=lock, client=client)
    with pytest.raises(UserError) as err:
        images.build(r, client, extra_ca=images.read_extra_ca(_extra_ca_path()), log=lambda line: None,
                     log_dir=tmp_path)
    message = str(err.value)
    assert message.startswith(f"building {r.tag} failed at Step ") and "the full log is" in message
    assert (tmp_path / "build-tensorflow-cpu.log").is_file()


@pytest.mark.docker
def test_missing_image_without_build_names_the_build_command(client, test_base, tmp_path, probe_kits, dirs):
    lock = tmp_path / "never-built.txt"
    lock.write_text(f"# {uuid.uuid4().hex}\n")
    runner = dr.DockerRunner(REPO, dirs["data"], kits_dir=probe_kits, base_override=test_base,
                             lock_overrides={"tensorflow": lock}, build_missing=False, client=client)
    with pytest.raises(UserError, match="is missing; build it with `nox -s images`"):
        runner.prepare({"tensorflow"})


@pytest.mark.docker
def test_missing_base_override_names_the_script(client, tmp_path, probe_lock):
    with pytest.raises(UserError, match="build-test-base-image"):
        images.recipe("tensorflow", "cpu", base_override="reprokit/no-such-base:x", lock_override=probe_lock,
                      client=client)


# ---------------------------------------------------------------------------
# Without an engine: engine down, pins (the GPU host check: tests/test_host_checks.py)

def test_engine_down_is_one_clear_message(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    ok, reason = host_checks.engine_status()
    assert not ok and "no Docker engine answers" in reason and "start" in reason
    with pytest.raises(UserError, match="no Docker engine answers .*; start it"):
        docker_client.client_or_error()


def _repo_copy(tmp_path: Path, digest: str | None = None) -> Path:
    """docker/ and empty lock files of every framework docker/bases.toml names (each Dockerfile's base pinned to
    digest where one is given)."""
    root = tmp_path / "repo"
    (root / "docker").mkdir(parents=True)
    (root / "locks").mkdir()
    bases = base_images.load_bases(REPO)
    (root / "docker" / "bases.toml").write_text((REPO / "docker" / "bases.toml").read_text())
    for entry in bases.values():
        text = (REPO / entry["dockerfile"]).read_text()
        if digest is not None:
            name_part, _ = base_images.split_ref(base_images.base_of(REPO / entry["dockerfile"]))
            text = base_images._ARG_RE.sub(f"ARG BASE_IMAGE={name_part}@{digest}", text)
        (root / entry["dockerfile"]).write_text(text)
        for lock in entry["locks"].values():
            (root / lock).write_text("")
    return root


def test_base_images_are_pinned_by_digest_or_explicitly_unresolved():
    bases = base_images.load_bases(REPO)
    for entry in bases.values():
        ref = base_images.base_of(REPO / entry["dockerfile"])
        name, digest = base_images.split_ref(ref)
        assert name.startswith("docker.io/library/python:3.11-slim-bookworm"), ref
        assert digest == base_images.UNRESOLVED or base_images.DIGEST_RE.match(digest), ref
        text = (REPO / entry["dockerfile"]).read_text()
        assert "# base-pin: " in text, "every pin says where its digest comes from"
        assert "FROM ${BASE_IMAGE} AS builder" in text and "COPY --from=builder /opt/venv /opt/venv" in text
        assert "USER 10001:10001" in text


def test_unresolved_digest_stops_the_build_with_the_pin_command(tmp_path):
    root = _repo_copy(tmp_path, base_images.UNRESOLVED)
    with pytest.raises(UserError) as err:
        images.recipe("pytorch", repo_root=root)
    message = str(err.value)
    assert "has no resolved digest" in message and "`nox -s pin`" in message
    assert message.endswith(".") and ". " not in message          # one sentence


def test_pin_rewrites_the_dockerfiles(tmp_path):
    root = _repo_copy(tmp_path, base_images.UNRESOLVED)
    digest = "sha256:" + "ab" * 32
    asked = []
    done = base_images.pin(repo_root=root, resolve=lambda name: asked.append(name) or digest, log=lambda line: None)
    bases = base_images.load_bases(REPO)
    assert asked == ["docker.io/library/python:3.11-slim-bookworm"] * len(bases)
    for fw, entry in bases.items():
        path = root / entry["dockerfile"]
        assert base_images.base_of(path) == f"docker.io/library/python:3.11-slim-bookworm@{digest}" == done[fw]
        assert "resolved on its registry by `nox -s pin`" in path.read_text()
    r = images.recipe("pytorch", repo_root=root)
    assert r.base_digest == digest and r.base_pinned and r.tag.startswith("reprokit/pytorch:")
    with pytest.raises(UserError, match="could not resolve .* run `nox -s pin`"):
        base_images.pin(repo_root=root, resolve=lambda name: (_ for _ in ()).throw(OSError("no route")),
                   log=lambda line: None)


def test_image_tags_follow_content(tmp_path):
    root = _repo_copy(tmp_path, "sha256:" + "cd" * 32)
    a = images.recipe("tensorflow", "cpu", repo_root=root)
    assert a.tag == images.recipe("tensorflow", "cpu", repo_root=root).tag
    assert a.tag.startswith("reprokit/tensorflow-cpu:")
    (root / "locks" / "tensorflow-cpu.txt").write_text("# changed\n")
    assert images.recipe("tensorflow", "cpu", repo_root=root).tag != a.tag
    # PyTorch's two flavors share a lock file, hence one image
    assert images.recipe("pytorch", "cpu", repo_root=root).tag == images.recipe("pytorch", "cuda", repo_root=root).tag


def test_extra_ca_must_be_pem(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    with pytest.raises(UserError, match="holds no PEM certificate"):
        images.read_extra_ca(bad)
    with pytest.raises(UserError, match="cannot read the extra CA file"):
        images.read_extra_ca(tmp_path / "missing.pem")


def test_the_docker_socket_is_never_mounted(tmp_path):
    for host in ("/var/run", "/run", "/var/run/docker.sock", "/"):
        with pytest.raises(UserError, match="Docker socket"):
            dr.DockerRunner(REPO, tmp_path, extra_mounts=[(host, "/opt/reprokit/user")])
    with pytest.raises(UserError, match="not allowed"):
        dr.DockerRunner(REPO, tmp_path, extra_mounts=[(tmp_path, "/results")])


# ---------------------------------------------------------------------------
# The real kit, end to end, in an image built from the project's own Dockerfile

@pytest.mark.docker
@pytest.mark.slow
def test_tensorflow_kit_runs_end_to_end_in_the_cpu_image(client, test_base, tiny_dir, data_dir, tmp_path):
    from reprokit.plan.experiments import load
    from reprokit.plan.plan import Options, specs_for
    from reprokit.results.provenance import code

    for needed in ("reprokit/kits/run.py", "locks/tensorflow-cpu.txt"):
        if not (REPO / needed).is_file():
            _unavailable(f"{needed} does not exist yet")
    runner = dr.DockerRunner(REPO, data_dir, gpus="none", base_override=test_base,
                             extra_ca=_extra_ca_path(), client=client, log=print)
    assert runner.flavor == "cpu" and runner.recipe("tensorflow").lock.name == "tensorflow-cpu.txt"
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("tensorflow",),
                   data=data_step.Preparing(data_dir, allow_download=False))
    (spec,) = specs_for(load(tiny_dir / "tiny.toml"), opts, runner.describe, code())
    # as on a host run by root: the plan's dataset file is 0600 and pytest's folders 0700; the runner
    # shares just that file with the container's (non-root) user
    runner.prepare({"tensorflow"})                      # builds the image once; cached by tag afterwards
    events: list[dict] = []
    result = base.run_spec(runner, spec, tmp_path / "work", events.append)

    assert result["status"] == "ok", result.get("failure")
    assert results.problems(result) is None            # the same schema a local run is checked against
    tag = runner.recipe("tensorflow").tag
    assert result["provenance"]["image"] == tag == result["launcher"]["image"]["ref"]
    assert result["launcher"]["image"]["id"] == client.images.get(tag).id
    assert result["launcher"]["image"]["base_digest"] == client.images.get(test_base).id
    assert result["environment"]["framework"] == "tensorflow" and result["environment"]["device"] == "cpu"
    assert events, "the kit's progress lines reach the host while it runs"
    assert_removed(client, spec.run_id)


@pytest.mark.docker
@pytest.mark.slow
def test_a_users_script_runs_unmodified_under_the_probe_in_the_cpu_image(client, test_base, data_dir, tmp_path,
                                                                              kit_python):
    """A Keras script of a user's own folder in the pinned TensorFlow image: its folder read-only, no network,
    the probe's result file like a kit run's."""
    from reprokit.plan import script_plan
    from reprokit.plan.experiments import load
    from reprokit.plan.plan import Options
    from reprokit.results.provenance import code

    folder = REPO / "tests" / "user_scripts"
    runner = dr.DockerRunner(REPO, data_dir, gpus="none", base_override=test_base, extra_ca=_extra_ca_path(),
                             client=client, log=print)
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("tensorflow",),
                   data=data_step.Preparing(data_dir, allow_download=False))
    exp = load(folder / "twin_pair.toml")
    (spec,) = script_plan.specs_for(exp.name, exp.scripts, opts, runner.describe, code())
    runner.prepare({"tensorflow"})
    result = base.run_spec(runner, spec, tmp_path / "work", lambda event: None)
    assert result["status"] == "ok" and results.problems(result) is None, result.get("failure")
    assert result["launcher"]["backend"] == "docker" and result["spec"]["script"]["path"] == "keras_graph.py"
    assert result["effective"]["train_steps_per_epoch"] == [3] and result["environment"]["execution"] == \
        "tf.function graph"
    assert any("no network" in s for s in result["probe"]["shims"])
    assert_removed(client, spec.run_id)
    # The certificate's TensorFlow side in the container, from a PyTorch side made here (CI builds no PyTorch
    # image): the PyTorch weights and batch mounted read-only, the script stopped at its first step.
    from reprokit.certify import script_certificate
    from reprokit.kits.framework_free import numeric_checks
    kit_python("pytorch")
    both = Options(profile="quick", device="cpu", repeats=1, frameworks=("pytorch", "tensorflow"),
                   data=data_step.Preparing(data_dir, allow_download=False))
    pair = {s.framework: s.to_dict() for s in script_plan.specs_for(exp.name, exp.scripts, both, runner.describe,
                                                                       code())}
    pt_out, pt, _ = script_certificate._side("pytorch", pair["pytorch"], LocalRunner(ENVS, data_dir, "cpu"),
                                             tmp_path / "cert", None)
    _, tf, why = script_certificate._side("tensorflow", pair["tensorflow"], runner, tmp_path / "cert", pt_out)
    assert tf and tf["status"] == "ok" and tf["weights"]["source"] == "loaded", why or tf
    assert numeric_checks.compare_logits({"pytorch": pt["logits"], "tensorflow": tf["logits"]}, 1e-4)["passed"]


@pytest.mark.docker
@pytest.mark.slow
def test_a_tutorial_style_keras_script_loads_mnist_by_name_in_the_cpu_image(client, test_base, data_dir, tmp_path):
    """The corpus's Keras beginner script (tests/corpus/mnist_examples/) in the pinned TensorFlow image: MNIST
    through keras.datasets with no network, fit's own batch of 32 under the bounds, its evaluate after training."""
    from reprokit.plan import script_plan
    from reprokit.plan.experiments import from_scripts
    from reprokit.plan.plan import Options
    from reprokit.results.provenance import code

    runner = dr.DockerRunner(REPO, data_dir, gpus="none", base_override=test_base, extra_ca=_extra_ca_path(),
                             client=client, log=print)
    opts = Options(profile="quick", device="cpu", repeats=1, frameworks=("tensorflow",),
                   data=data_step.Preparing(data_dir, allow_download=False))
    exp = from_scripts("corpus", {"tensorflow": REPO / "tests" / "corpus" / "mnist_examples" / "beginner_keras.py"})
    (spec,) = script_plan.specs_for(exp.name, exp.scripts, opts, runner.describe, code())
    runner.prepare({"tensorflow"})
    result = base.run_spec(runner, spec, tmp_path / "work", lambda event: None)
    assert result["status"] == "ok" and results.problems(result) is None, result.get("failure")
    assert result["launcher"]["backend"] == "docker"
    assert result["effective"]["batch_size"]["min"] == result["effective"]["batch_size"]["max"] == 32
    assert result["effective"]["test_samples"] >= 300
    assert any("the generated MNIST stand-in" in s for s in result["probe"]["shims"]), result["probe"]["shims"]
    assert "the script ran to its end" in result["probe"]["ended"]
    assert_removed(client, spec.run_id)


# ---------------------------------------------------------------------------
# Backend choice (what `nox -s reproduce` calls once an engine answers)

@pytest.mark.docker
def test_select_says_why_it_falls_back_to_local(client, monkeypatch, tmp_path):
    monkeypatch.setattr(choose, "_registry_reachable", lambda c, ref: False)    # as on an offline machine
    monkeypatch.setattr(choose, "_local_image", lambda c, ref: False)
    runner, why = choose.select(REPO, tmp_path, "none", device="cpu", client=client, log=lambda line: None,
                            local=lambda: LocalRunner(ENVS, tmp_path, "cpu"))
    if runner.name == "docker":                      # this engine already has every image
        assert "answers" in why
        return
    assert runner.name == "local"
    assert "can neither be found locally nor pulled" in why and "`nox -s images`" in why
    with pytest.raises(UserError, match="can neither be found locally nor pulled"):
        choose.select(REPO, tmp_path, "none", device="cpu", forced=True, client=client)


@pytest.mark.docker
def test_select_picks_docker_when_the_images_can_be_built(client, test_base, tmp_path):
    runner, why = choose.select(REPO, tmp_path, "none", (tmp_path,), device="cpu", base_override=test_base,
                            client=client, log=lambda line: None)
    assert runner.name == "docker" and why.startswith("Docker engine ") and "GPUs: none" in why
    assert runner.flavor == "cpu" and runner.extra_mounts == [(tmp_path.resolve(), "/opt/reprokit/user/0")]


@pytest.mark.docker
def test_select_with_gpus_but_no_nvidia_runtime(client, tmp_path):
    if host_checks.nvidia_runtime_available(client):
        pytest.skip("this engine has the NVIDIA runtime")
    runner, why = choose.select(REPO, tmp_path, "all", device="gpu", client=client,
                            local=lambda: LocalRunner(ENVS, tmp_path, "gpu"))
    assert runner.name == "local" and "nvidia-container-toolkit" in why
    for kw in ({"forced": True}, {"gpus_explicit": True}):
        with pytest.raises(UserError, match="no NVIDIA container runtime; install nvidia-container-toolkit"):
            choose.select(REPO, tmp_path, "all", device="gpu", client=client, **kw)

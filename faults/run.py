"""The fault-injection suite (`nox -s faults`): each fault injected from outside into a real matrix.

Every fault is made as it happens to a user, never by patching the kit: signals to the orchestrator's
real process id, bytes cut off a file on disk, a file system that is really full, a Docker engine that
is really killed, a node of a real Ray cluster taken away, users' scripts that fail or fork without end.
Each runs `reprokit reproduce` on the quick profile (faults/tiny.toml: a run takes a few seconds) in a
scratch folder of its own, and is judged by what a user would see and by an independent listing of the
folders, not by what the kit says of itself:

  survived   the command ended as the issue asks (its exit status, one sentence, no traceback)
  kept       the finished results still there afterwards, byte for byte, of those finished before
  leftovers  kit processes, containers, mounts under the scratch folder and half-written files
             that were not there before

The last line is `faults survived: N of N, results lost: L`; the exit status is 0 only if every fault
was survived with nothing lost or left. `--fast` runs the faults that no test of the suite proves already
(CI runs these; PROVED_IN_CI names the test for each other one); `--only NAME` one fault.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tabulate import tabulate

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
TIMEOUT_S = 600
RUNS = 2                  # a matrix's runs: one finishes, the fault lands in the next


@dataclass
class Line:
    fault: str
    injected: str = "not injected"
    survived: bool = False
    run: bool = True
    why: str = ""
    finished: int = 0          # results finished before the fault
    kept: int = 0              # of those, still there and unchanged after it
    leftovers: list[str] = field(default_factory=list)


class Failed(Exception):
    """The fault was not survived: the reason, in one line."""


class NotRun(Exception):
    """The fault cannot be made on this machine (no Docker engine or image, not root): why, in one line."""


def docker_or_not_run(text: str) -> None:
    """A Docker fault whose command was refused for want of an engine or an image is not run, and says why."""
    errors = [ln for ln in text.splitlines() if ln.startswith("error: ")]
    if errors and any(w in errors[0] for w in ("image", "Docker engine", "docker")):
        raise NotRun(errors[0])


# ---------------------------------------------------------------------------
# Independent listings: what is on disk and what runs, read without the kit's own code

def finished(state: Path) -> dict[str, str]:
    """Result files that parse and say how their run ended, by name: their bytes' sha256."""
    out = {}
    for path in sorted((state / "results").glob("*.json")):
        data = path.read_bytes()
        try:
            result = json.loads(data)
        except ValueError:
            continue
        if isinstance(result, dict) and result.get("status") in ("ok", "failed") and result.get("run_id"):
            out[path.name] = hashlib.sha256(data).hexdigest()
    return out


def results_of(state: Path) -> list[dict]:
    return [json.loads((state / "results" / name).read_text()) for name in finished(state)]


def kept(before: dict[str, str], after: dict[str, str]) -> int:
    return sum(after.get(name) == digest for name, digest in before.items())


def _processes(marker: str) -> dict[int, str]:
    out = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z" and int(proc.name) != os.getpid():
            out[int(proc.name)] = cmd
    return out


def kit_processes(state: Path) -> dict[int, str]:
    """The kit processes of a state folder (their spec lies in its work folder)."""
    return {pid: cmd for pid, cmd in _processes(str(state / "work")).items() if " -m kits." in cmd}


def _docker(*args: str) -> list[str]:
    if shutil.which("docker") is None:
        return []
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60)
    return proc.stdout.split() if proc.returncode == 0 else []


def snapshot(scratch: Path) -> set[str]:
    """Everything a fault could leave behind, as lines: processes, containers, mounts, temporary files."""
    things = {f"process {pid}: {cmd[:100]}" for pid, cmd in _processes(str(scratch)).items()}
    things |= {f"container {c}" for c in _docker("ps", "-aq", "--filter", "label=reprokit=1")}
    with open("/proc/self/mounts") as fh:
        things |= {f"mount {line.split()[1]}" for line in fh if line.split()[1].startswith(str(scratch))}
    things |= {f"half-written file {p}" for p in scratch.rglob(".*.tmp")}
    return things


# ---------------------------------------------------------------------------
# Running the CLI as a user does

class Suite:
    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.data = scratch / "data"
        self.experiments = scratch / "experiments"
        self.experiments.mkdir(parents=True)
        shutil.copy(HERE / "tiny.toml", self.experiments / "faults.toml")
        self.n = 0

    def folder(self, name: str) -> Path:
        self.n += 1
        return self.scratch / f"{self.n:02d}-{name}"

    def command(self, state: Path, *extra: str, frameworks: str = "pytorch", repeats: int = RUNS,
                backend: str = "local") -> list[str]:
        how = ["--experiments", str(self.experiments), "--only", "faults", "--variants", "fixed"]
        if "--script" in extra:
            how = []
        return [sys.executable, "-m", "reprokit", "reproduce", *how, "--frameworks", frameworks,
                "--profile", "quick", "--backend", backend, "--repeats", str(repeats), "--no-certify",
                "--claims", "none", "--state-dir", str(state), "--reports-dir", str(state.parent / "reports"),
                "--data-dir", str(self.data), "--name", state.name, *extra]

    @staticmethod
    def start(cmd: list[str], log: Path) -> subprocess.Popen[str]:
        # A session of its own: the suite's own Ctrl-C does not reach it, and its signals are the faults.
        return subprocess.Popen(cmd, cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

    @staticmethod
    def run(cmd: list[str], timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def said_finished(text: str) -> int:
    """The runs the command's own progress said had ended with a result (ok or FAILED), each counted once."""
    return len({ln.split(" · ")[0] for ln in text.splitlines() if ln.startswith("[run ")
                and (" · ok · " in ln or " · FAILED (" in ln)})


def output_of(proc: subprocess.CompletedProcess[str] | Path) -> str:
    return proc.read_text() if isinstance(proc, Path) else proc.stdout + proc.stderr


def expect(ok: bool, why: str) -> None:
    if not ok:
        raise Failed(why)


def no_traceback(text: str) -> None:
    expect("Traceback" not in text, "a traceback was printed: " + text[text.find("Traceback"):][:300])


def wait_until(what: str, ready: Callable[[], bool], proc: subprocess.Popen[str] | None = None,
               timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc is not None and proc.poll() is not None:
            raise Failed(f"the command ended (status {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise Failed(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.1)


def mid_run(suite: Suite, state: Path, proc: subprocess.Popen[str], results: int = 1) -> dict[str, str]:
    """Wait until `results` runs are finished and the next run's kit process trains; the finished listing."""
    wait_until(f"{results} finished run(s) and a kit process", lambda: len(finished(state)) >= results
               and bool(kit_processes(state)), proc)
    return finished(state)


# ---------------------------------------------------------------------------
# The faults

def sigterm(suite: Suite, line: Line, signals: int = 1, signum: int = signal.SIGTERM, backend: str = "local") -> None:
    state = suite.folder(("sigterm" if signals == 1 else "ctrl-c-twice") + ("-docker" if backend == "docker" else ""))
    frameworks = "tensorflow" if backend == "docker" else "pytorch"      # the image CI can build here
    cmd = suite.command(state, frameworks=frameworks, backend=backend)
    log = state.parent / f"{state.name}.log"
    proc = suite.start(cmd, log)
    if backend == "docker":
        try:
            wait_until("a finished run and a running container", lambda: len(finished(state)) >= 1
                       and bool(_docker("ps", "-q", "--filter", "label=reprokit=1")), proc)
        except Failed:
            docker_or_not_run(output_of(log))
            raise
        before = finished(state)
    else:
        before = mid_run(suite, state, proc)
    line.finished = len(before)
    t0 = time.monotonic()
    for i in range(signals):
        os.kill(proc.pid, signum)
        line.injected = (f"{'SIGTERM' if signum == signal.SIGTERM else 'SIGINT'} x{signals} to pid {proc.pid} "
                         f"with {len(before)} run(s) finished{' (Docker runner)' if backend == 'docker' else ''}")
        if i + 1 < signals:
            time.sleep(0.3)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise Failed("the command was still running 60 s after the signal") from None
    took = time.monotonic() - t0
    text = output_of(log)
    line.kept = kept(before, finished(state))
    no_traceback(text)
    expect(code == 130, f"exit status {code}, not 130")
    expect(took <= (2 if signals > 1 else 10), f"it took {took:.1f} s to stop")
    expect(not kit_processes(state), "a kit process survived the signal")
    expect(not _docker("ps", "-aq", "--filter", "label=reprokit=1"), "a container survived the signal")
    expect(shlex.join(cmd[3:]) in text.replace(shlex.join(cmd[:3]), ""),
           "the command to run to go on was not printed")
    again = suite.run(cmd)
    expect(again.returncode == 0 and len(finished(state)) == RUNS,
           "the same command again did not finish the matrix")
    line.why = f"stopped in {took:.1f} s; the same command again ran the {RUNS - len(before)} other run(s)"


def sigterm_docker(suite: Suite, line: Line) -> None:
    sigterm(suite, line, backend="docker")


def ctrl_c_twice(suite: Suite, line: Line) -> None:
    sigterm(suite, line, signals=2, signum=signal.SIGINT)


def kill_9(suite: Suite, line: Line) -> None:
    state = suite.folder("kill-9")
    cmd = suite.command(state)
    proc = suite.start(cmd, state.parent / f"{state.name}.log")
    before = mid_run(suite, state, proc)
    line.finished = len(before)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    line.injected = f"SIGKILL to pid {proc.pid} with {len(before)} run(s) finished"
    wait_until("the kit process to end with its orchestrator", lambda: not kit_processes(state), timeout=2)
    again = suite.run(cmd)
    line.kept = kept(before, finished(state))
    no_traceback(output_of(again))
    expect(again.returncode == 0 and len(finished(state)) == RUNS,
           "the same command again did not finish the matrix")
    line.why = (f"the kit process ended with the orchestrator; the same command again ran {RUNS - len(before)} "
                f"run(s)")


def damaged_result(suite: Suite, line: Line) -> None:
    state = suite.folder("damaged-result")
    cmd = suite.command(state)
    expect(suite.run(cmd).returncode == 0, "the first matrix failed")
    before = finished(state)
    victim = sorted((state / "results").glob("*.json"))[0]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    line.injected = f"{victim.name} cut to half its bytes"
    del before[victim.name]
    line.finished = len(before)
    again = suite.run(cmd)
    text = output_of(again)
    line.kept = kept(before, finished(state))
    no_traceback(text)
    expect(again.returncode == 0, f"exit status {again.returncode}: {text[-300:]}")
    expect(f"result {victim.stem} was damaged" in text and "quarantine" in text, "the damaged file was not named")
    expect(victim.name in finished(state), "its run did not run again")
    line.why = "named, moved to quarantine/, its run ran again"


def damaged_report(suite: Suite, line: Line) -> None:
    state = suite.folder("damaged-report")
    expect(suite.run(suite.command(state)).returncode == 0, "the matrix failed")
    report = state.parent / "reports" / state.name
    files = sorted((report / "results").glob("*.json"))
    victim = files[0]
    victim.write_bytes(victim.read_bytes()[:100])
    line.injected = f"the report's {victim.name} cut to 100 bytes"
    others = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files[1:]}
    compared = suite.run([sys.executable, "-m", "reprokit", "compare", str(report), str(report)])
    text = output_of(compared)
    line.finished = len(others)
    line.kept = sum(hashlib.sha256((report / "results" / n).read_bytes()).hexdigest() == d for n, d in others.items())
    no_traceback(text)
    expect(victim.name in text, "compare did not name the damaged file")
    expect(victim.exists(), "compare moved a file of a report folder (evidence is read, never moved)")
    line.why = f"compare named it in one sentence and compared the other {len(files) - 1}"


def two_commands(suite: Suite, line: Line) -> None:
    state = suite.folder("two-commands")
    cmd = suite.command(state)
    first = suite.start(cmd, state.parent / f"{state.name}-1.log")
    before = mid_run(suite, state, first, results=0)
    second = suite.run(cmd, timeout=60)
    line.injected = f"the same command again on the same state folder while pid {first.pid} runs"
    text = output_of(second)
    no_traceback(text)
    expect(second.returncode == 2 and str(first.pid) in text, f"the second command did not refuse, naming pid "
           f"{first.pid}: status {second.returncode}, {text[-300:]}")
    waiting = suite.run([*cmd, "--wait"])
    expect(first.wait(TIMEOUT_S) == 0, "the first command failed")
    expect(waiting.returncode == 0 and f"{RUNS} already finished, 0 to run" in waiting.stdout,
           "--wait did not wait for the first command")
    line.finished, line.kept = len(before), kept(before, finished(state))
    expect(len(finished(state)) == RUNS, f"not {RUNS} results")
    line.why = f"the second refused naming the first's pid; with --wait it queued and found all {RUNS} finished"


def two_state_folders(suite: Suite, line: Line) -> None:
    a, b = suite.folder("device-a"), suite.folder("device-b")
    first = suite.start(suite.command(a), a.parent / f"{a.name}.log")
    mid_run(suite, a, first, results=0)
    second = suite.run(suite.command(b))
    line.injected = "a second command on another state folder, timing on the same CPU"
    expect(first.wait(TIMEOUT_S) == 0 and second.returncode == 0, "a command failed")
    no_traceback(output_of(second))
    expect("waiting for" in output_of(second).lower(), "the second command did not wait for the device")
    overlapping = [r["run_id"] for r in results_of(a) + results_of(b) if r.get("launcher", {}).get("co_load")]
    expect(not overlapping, f"runs timed beside another: {overlapping}")
    line.why = "the second waited for the CPU's lock; no timed run overlapped another"


@contextlib.contextmanager
def small_disk(path: Path, size_kib: int) -> Iterator[Path]:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def disk_full(suite: Suite, line: Line) -> None:
    if os.geteuid() != 0:
        raise NotRun("not root: a small file system cannot be mounted here (run the suite as root)")
    root = suite.folder("disk-full")
    with small_disk(root / "fs", 4096) as fs:
        state = fs / "state"
        cmd = suite.command(state, repeats=6)
        # leave room for about two runs' files (a result is ~11 KB, its work folder ~24 KB)
        filler = fs / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1k", "count=4010"], capture_output=True)
        line.injected = "the state folder on a 4 MiB tmpfs with about 80 KiB free"
        proc = suite.run(cmd)
        text = output_of(proc)
        listing = finished(state)
        line.finished = said_finished(text)
        line.kept = len(listing)
        no_traceback(text)
        expect(proc.returncode != 0, "the command did not stop")
        expect("disk-full" in text, "the lost run was not named with kind disk-full")
        expect(all(json.loads((state / "results" / n).read_text()) for n in listing), "a result file is damaged")
        last = [ln for ln in text.strip().splitlines() if ln.strip()][-1]
        expect("need" in last, f"the last line does not say how much space the rest needs: {last}")
        need = re.search(r"the \d+ run\(s\) left need about [^(;]+", last)
        line.why = f"{len(listing)} result(s) intact; it stopped: {need.group().strip() if need else last[:80]}"


def timeout(suite: Suite, line: Line) -> None:
    state = suite.folder("timeout")
    proc = suite.run(suite.command(state, "--timeout", "2"))
    line.injected = "--timeout 2 on runs that take longer"
    kinds = [r["failure"]["kind"] for r in results_of(state) if r["status"] == "failed"]
    no_traceback(output_of(proc))
    expect(proc.returncode == 1 and kinds == ["timeout", "timeout"], f"status {proc.returncode}, kinds {kinds}")
    line.why = "both runs failed as timeout, the matrix went on, the report was written"


def script_fault(script: str, kind: str, framework: str = "pytorch", backend: str = "local",
                 extra: tuple[str, ...] = ()) -> Callable[[Suite, Line], None]:
    def fault(suite: Suite, line: Line) -> None:
        state = suite.folder(Path(script).stem)
        proc = suite.run(suite.command(state, "--script", f"{framework}={SCRIPTS / script}", *extra,
                                       frameworks=framework, repeats=1, backend=backend))
        doc = (SCRIPTS / script).read_text().splitlines()[0].strip('"').rstrip(".")
        line.injected = f"a user's script: {doc[0].lower()}{doc[1:]}"
        got = [r["failure"]["kind"] for r in results_of(state) if r["status"] == "failed"]
        if backend == "docker":
            docker_or_not_run(output_of(proc))
        no_traceback(output_of(proc))
        expect(proc.returncode == 1 and got == [kind], f"status {proc.returncode}, failure kinds {got}, not [{kind}]")
        line.why = f"a failed run of kind {kind}"
    return fault


def oom(suite: Suite, line: Line) -> None:
    state = suite.folder("oom")
    proc = suite.run(suite.command(state, "--memory-limit", "256m", frameworks="tensorflow", repeats=1,
                                   backend="docker"))
    line.injected = "the TensorFlow container limited to 256 MiB of memory"
    got = [r["failure"]["kind"] for r in results_of(state) if r["status"] == "failed"]
    docker_or_not_run(output_of(proc))
    no_traceback(output_of(proc))
    expect(proc.returncode == 1 and got == ["oom"], f"status {proc.returncode}, failure kinds {got}")
    line.why = "a failed run of kind oom"


def gpu_refused(suite: Suite, line: Line) -> None:
    state = suite.folder("gpu-refused")
    proc = suite.run(suite.command(state, "--gpus", "all", frameworks="tensorflow", repeats=1, backend="docker"))
    line.injected = "--gpus all on an engine without the NVIDIA runtime"
    text = output_of(proc)
    no_traceback(text)
    errors = [ln for ln in text.splitlines() if ln.startswith("error: ")]
    expect(proc.returncode == 2 and len(errors) == 1 and not finished(state),
           f"status {proc.returncode}, not one sentence before any run: {text[-300:]}")
    line.why = errors[0][:100]


def engine_killed(suite: Suite, line: Line) -> None:
    state = suite.folder("engine-killed")
    cmd = suite.command(state, frameworks="tensorflow", backend="docker")
    log = state.parent / f"{state.name}.log"
    proc = suite.start(cmd, log)
    try:
        wait_until("a running container", lambda: bool(_docker("ps", "-q", "--filter", "label=reprokit=1")), proc)
    except Failed:
        docker_or_not_run(output_of(log))
        raise
    before = finished(state)
    pid = int(Path("/var/run/docker.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    line.injected = f"SIGKILL to dockerd (pid {pid}) mid-run"
    try:
        time.sleep(3)
    finally:
        subprocess.run([str(REPO / "scripts" / "start-dockerd")], capture_output=True, check=True)
    code = proc.wait(TIMEOUT_S)
    text = output_of(state.parent / f"{state.name}.log")
    no_traceback(text)
    kinds = [r["status"] if r["status"] == "ok" else r["failure"]["kind"] for r in results_of(state)]
    expect("engine-lost" in kinds, f"the run in flight was not recorded as engine-lost: {kinds} (status {code})")
    line.finished, line.kept = len(before), kept(before, finished(state))
    line.why = f"the run in flight failed as engine-lost; the matrix ended with {kinds}"


def node_lost(suite: Suite, line: Line) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    import ray_cluster  # before Ray: it keeps every Ray process on the loopback
    root = Path(tempfile.mkdtemp(prefix="rf", dir="/tmp"))        # Ray's socket paths must stay short
    cluster = ray_cluster.LocalCluster(root)
    try:
        cluster.add_worker("n1"), cluster.add_worker("n2")
        state = suite.folder("node-lost")
        cmd = suite.command(state, "--ray-address", cluster.address, "--ray-runner", "local",
                            backend="ray")
        env = {**os.environ, **ray_cluster.RAY_ENV}
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def running(node: str) -> bool:
            return any(json.loads(p.read_text())["end"] is None for p in (root / node / "ledger").glob("*.json"))
        wait_until("a run on each node", lambda: running("n1") and running("n2"), proc)
        cluster.kill("n1")
        line.injected = "node n1 of a 2-node Ray cluster taken away mid-run"
        out, _ = proc.communicate(timeout=TIMEOUT_S)
        no_traceback(out)
        done = results_of(state)
        expect(proc.returncode == 0 and len(done) == 2 and all(r["status"] == "ok" for r in done),
               f"status {proc.returncode}: {out[-300:]}")
        line.why = "the lost run (node-lost) was retried on n2; both finished"
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


FAULTS: dict[str, Callable[[Suite, Line], None]] = {
    "sigterm": sigterm,
    "sigterm, docker": sigterm_docker,
    "ctrl-c twice": ctrl_c_twice,
    "kill -9": kill_9,
    "damaged result": damaged_result,
    "damaged report": damaged_report,
    "two commands": two_commands,
    "two state folders": two_state_folders,
    "disk full": disk_full,
    "timeout": timeout,
    "exit code": script_fault("exit_code.py", "exit-code"),
    "invalid output": script_fault("exits_early.py", "invalid-output"),
    "oom": oom,
    "gpu refused": gpu_refused,
    "fork bomb": script_fault("fork_bomb.py", "timeout", "tensorflow", "docker", ("--timeout", "30")),
    "engine killed": engine_killed,
    "node lost": node_lost,
}
# Where CI's suite proves a fault already, with the same injection from outside on a real run: `--fast` (CI's
# subset, tests/test_fault_suite.py) runs only the others, so CI covers every fault once.
PROVED_IN_CI: dict[str, str] = {
    "sigterm": "tests/test_signals.py::test_a_signal_stops_the_kit_keeps_results_and_says_how_to_go_on",
    "sigterm, docker": "tests/test_docker_faults.py::test_a_second_ctrl_c_removes_the_running_container_at_once",
    "ctrl-c twice": "tests/test_signals.py::test_a_second_ctrl_c_while_the_command_exits_still_ends_it_with_130",
    "kill -9": "tests/test_orphans.py::test_a_killed_orchestrator_takes_its_local_kit_process_with_it",
    "damaged result": "tests/test_state_files.py::test_reproduce_with_a_result_cut_short_runs_that_run_again",
    "two commands": "tests/test_state_locks.py::test_a_second_command_on_a_state_folder_refuses_or_waits",
    "two state folders": "tests/test_state_locks.py::test_two_state_folders_never_time_runs_on_one_device_at_once",
    "disk full": "tests/test_disk_full.py::test_a_full_state_folder_loses_one_run_and_stops_in_one_sentence",
    "timeout": ("tests/test_reproduce.py::"
                "test_a_timeout_is_recorded_then_reproduce_writes_results_and_report_and_resumes"),
    "oom": "tests/test_docker_runner.py::test_host_memory_oom_is_recorded_as_oom",
    "gpu refused": "tests/test_docker_runner.py::test_gpus_without_nvidia_runtime_fail_before_any_container",
    "fork bomb": "tests/test_docker_faults.py::test_a_fork_bomb_ends_as_a_failed_run_and_the_host_keeps_answering",
    "engine killed": ("tests/test_docker_faults.py::"
                      "test_an_engine_killed_mid_run_is_engine_lost_then_the_matrix_waits_for_it"),
    "node lost": "tests/test_ray_backend.py::test_a_lost_node_is_retried_elsewhere_and_nothing_is_lost",
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nox -s faults --", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fast", action="store_true", help="only the faults no test of the suite proves (CI runs these)")
    p.add_argument("--only", action="append", choices=FAULTS, help="only this fault (repeatable)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder (its logs) afterwards")
    args = p.parse_args(argv)
    names = args.only or [n for n in FAULTS if not (args.fast and n in PROVED_IN_CI)]
    scratch = Path(tempfile.mkdtemp(prefix="reprokit-faults-"))
    suite = Suite(scratch)
    lines = []
    t0 = time.monotonic()
    try:
        for name in names:
            line = Line(name)
            before = snapshot(scratch)
            t = time.monotonic()
            try:
                FAULTS[name](suite, line)
                line.survived = True
            except Failed as exc:
                line.why = str(exc)
            except NotRun as exc:
                line.run, line.why = False, str(exc)
            except Exception as exc:  # noqa: BLE001 - the suite's own failure is a fault not survived
                line.why = f"the suite failed: {exc!r}"
            time.sleep(0.5)
            line.leftovers = sorted(snapshot(scratch) - before)
            lines.append(line)
            print(f"{name}: {verdict(line)} in {time.monotonic() - t:.0f} s", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    rows = [[ln.fault, ln.injected, verdict(ln), ln.why, f"{ln.kept} of {ln.finished}",
             "; ".join(ln.leftovers) or "none"] for ln in lines]
    print(tabulate(rows, headers=["fault", "injected", "survived", "how", "results kept", "leftovers"],
                   tablefmt="github"))
    made = [ln for ln in lines if ln.run]
    survived = sum(verdict(ln) == "yes" for ln in made)
    lost = sum(ln.finished - ln.kept for ln in lines)
    not_run = [ln.fault for ln in lines if not ln.run]
    print(f"\nfaults survived: {survived} of {len(made)}, results lost: {lost}"
          + (f"; not run here: {', '.join(not_run)} (see above why)" if not_run else "")
          + f"  ({time.monotonic() - t0:.0f} s{'; scratch kept in ' + str(scratch) if args.keep else ''})")
    return 0 if survived == len(made) and lost == 0 else 1


def verdict(line: Line) -> str:
    if not line.run:
        return "not run"
    return "yes" if line.survived and not line.leftovers else "NO"


if __name__ == "__main__":
    sys.exit(main())

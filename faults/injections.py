"""The faults of the suite, one function each: made from outside as they happen to a user, then judged.

Each takes the Suite (its scratch folder and commands) and the fault's Line, which it fills in; it raises
Failed where the fault was not survived and NotRun where it cannot be made here (faults/run.py runs them).
"""
from __future__ import annotations

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
from pathlib import Path

from faults.harness import (
    REPO,
    RUNS,
    SCRIPTS,
    TIMEOUT_S,
    Failed,
    Line,
    NotRun,
    Suite,
    docker_or_not_run,
    expect,
    mid_run,
    no_traceback,
    output_of,
    said_finished,
    wait_until,
)
from faults.listing import docker_ids, finished, kept, kit_processes, results_of

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
                       and bool(docker_ids("ps", "-q", "--filter", "label=reprokit=1")), proc)
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
    expect(not docker_ids("ps", "-aq", "--filter", "label=reprokit=1"), "a container survived the signal")
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
        wait_until("a running container", lambda: bool(docker_ids("ps", "-q", "--filter", "label=reprokit=1")), proc)
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

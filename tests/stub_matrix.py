"""A `reprokit reproduce` of the numpy stub framework (tests/stub_plugin, a plugin package) as a real process: runs of about a second or
as long as a test needs, for faults injected from outside (signals, a full disk, a second command)."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import plugin_site
from checkout import REPO
from conftest import TINY


def experiment(folder: Path, epochs: int = 2, train_samples: int = 256, frameworks: str = '"stub"') -> Path:
    """The tiny experiment in the stub framework (and others named), each run ``epochs`` long."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (TINY.replace('frameworks = ["pytorch", "tensorflow"]', f"frameworks = [{frameworks}]")
            .replace("epochs = 2", f"epochs = {epochs}").replace("train_samples = 256", f"train_samples = {train_samples}"))
    (folder / "tiny.toml").write_text(text)
    return folder


def command(tmp: Path, exp: Path, state: Path, *extra: str, repeats: int = 3, frameworks: str = "stub",
            python: Path | None = None) -> list[str]:
    return [sys.executable, "-m", "reprokit", "reproduce", "--experiments", str(exp), "--only", "tiny",
            "--frameworks", frameworks, "--python", str(python or sys.executable), "--backend", "local",
            "--claims", "none", "--no-certify", "--variants", "fixed", "--repeats", str(repeats),
            "--state-dir", str(state), "--reports-dir", str(tmp / "reports"), "--data-dir", str(tmp / "data"),
            "--name", "t", *extra]


def env(**more: str) -> dict[str, str]:
    return plugin_site.env(PYTHONUNBUFFERED="1", **more)


def start(cmd: list[str], log: Path, **more: str) -> subprocess.Popen[str]:
    """The command, started; its output goes to log (a pipe nobody reads while the test waits would fill up)."""
    with open(log, "w") as fh:
        return subprocess.Popen(cmd, cwd=REPO, env=env(**more), stdout=fh, stderr=subprocess.STDOUT, text=True)


@contextlib.contextmanager
def ended_at_exit(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """The started command, killed on leaving if it is still running (a test that failed while waiting)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def output(proc: subprocess.Popen[str], log: Path, timeout: float) -> str:
    """What a started command printed, once it has ended (within timeout)."""
    proc.wait(timeout=timeout)
    return log.read_text()


def run(cmd: list[str], timeout: float = 120, **more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, env=env(**more), capture_output=True, text=True, timeout=timeout)


CHECK = """
import json, sys
from collections.abc import Iterator
from pathlib import Path
from reprokit.results import results
out = {}
for path in sorted(Path(sys.argv[1]).glob("*.json")):
    result = json.loads(path.read_text())
    out[path.stem] = {"run_id": result["run_id"], "status": result["status"], "problem": results.problems(result),
                      "failure": result["failure"]}
print(json.dumps(out))
"""


def stored(state: Path) -> dict[str, dict]:
    """The result files in a state folder, listed and parsed apart from the kit's Store (in a process that knows the
    stub framework): run id -> its status and failure. Each must parse and pass its schema."""
    got = run([sys.executable, "-c", CHECK, str(state / "results")], timeout=60)
    assert got.returncode == 0, got.stderr[-2000:]
    out = json.loads(got.stdout)
    for stem, r in out.items():
        assert r["problem"] is None and r["run_id"] == stem, f"{stem}.json: {r}"
    return out


def kit_processes(state: Path) -> dict[int, str]:
    """pid -> command line of every process whose command line names a file in the state folder (a kit's spec)."""
    out = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(state) in text and "reprokit.kits." in text:
            out[int(cmdline.parent.name)] = text
    return out


def wait_for(what, timeout: float = 60.0, every: float = 0.05):
    """what()'s first true value, polled until timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def gone(pid: int) -> bool:
    """The process has ended (a zombie not yet reaped by its parent counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")

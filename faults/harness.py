"""What every fault of the suite shares: the CLI run as a user runs it, the fault's line, and how it is judged.

A fault fills in its Line (what was injected, what finished and was kept, why it passed) and raises Failed
(not survived) or NotRun (cannot be made on this machine); expect(), no_traceback() and wait_until() say why
in one line.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from faults.listing import finished, kit_processes

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

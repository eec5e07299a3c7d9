"""What every runner returns, and how any outcome becomes a result file.

A runner starts ``python -m kits.run --spec SPEC --out OUT --data-dir DATA``
somewhere (a local virtualenv, a container) and reports what happened as an
``Outcome``. ``collect`` then turns that outcome plus whatever the kit wrote
into exactly one result dict, so a failed run is recorded the same way
whichever runner started it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from reprokit import results

# A kit prints lines starting with this marker followed by one JSON object;
# runners forward them to the progress display, everything else is log.
PROGRESS_MARKER = "REPROKIT-PROGRESS "

LOG_TAIL_LINES = 40

ProgressFn = Callable[[dict], None]


@dataclass
class Outcome:
    """How a kit process ended, as seen from outside it."""

    exit_code: int | None
    wall_s: float
    log_tail: list[str] = field(default_factory=list)
    timed_out: bool = False
    oom_killed: bool = False          # the kernel/engine killed it for host memory
    interrupted: bool = False         # Ctrl-C: never recorded as finished
    launcher: dict = field(default_factory=dict)   # runner-specific facts (image id, interpreter, ...)


class Runner(Protocol):
    name: str

    def prepare(self, frameworks: set[str]) -> None:
        """Build or check what the runs need; raise UserError before any run."""

    def describe(self, framework: str) -> dict:
        """Static facts recorded in every RunSpec (lock hash, image ref), part of its id."""

    def run(self, spec_path: Path, out_path: Path, framework: str, *,
            timeout_s: float, on_progress: ProgressFn) -> Outcome:
        """Run one kit process to completion (or timeout) and say how it ended."""


def split_line(line: str, on_progress: ProgressFn, tail: list[str]) -> None:
    """Route one line of kit output: progress events out, the rest into the log tail."""
    if line.startswith(PROGRESS_MARKER):
        try:
            on_progress(json.loads(line[len(PROGRESS_MARKER):]))
            return
        except json.JSONDecodeError:
            pass
    tail.append(line.rstrip("\n"))
    if len(tail) > LOG_TAIL_LINES:
        del tail[0]


GPU_OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "RESOURCE_EXHAUSTED", "OOM when allocating")


def collect(spec: dict, outcome: Outcome, out_path: Path) -> dict:
    """One result dict for any outcome: the kit's own file if it is valid, else a failure."""
    def failed(kind: str, message: str) -> dict:
        return results.failure(spec, kind, message, outcome.log_tail, outcome.wall_s, outcome.launcher)

    if outcome.timed_out:
        return failed("timeout", f"the run exceeded its {spec['limits']['timeout_s']:.0f} s limit")
    if outcome.oom_killed:
        return failed("oom", "killed for lack of host memory (OOMKilled)")
    start_error = outcome.launcher.get("container", {}).get("start_error")
    if start_error:
        return failed("error", f"the engine could not start the container: {start_error}")
    text = out_path.read_text() if out_path.exists() else None
    if outcome.exit_code != 0:
        if text is None:
            log = "\n".join(outcome.log_tail)
            if any(m in log for m in GPU_OOM_MARKERS):
                return failed("gpu-oom", "the framework ran out of GPU memory")
            return failed("exit-code", f"the kit exited with status {outcome.exit_code}")
    if text is None:
        return failed("invalid-output", "the kit wrote no result file")
    try:
        result = json.loads(text)
    except json.JSONDecodeError as exc:
        return failed("invalid-output", f"the result file is not JSON ({exc})")
    problem = results.problems(result)
    if problem:
        return failed("invalid-output", f"the result file does not match the schema: {problem}")
    if result.get("run_id") != spec["run_id"]:
        return failed("invalid-output", "the result file belongs to another run")
    result.setdefault("launcher", {}).update(outcome.launcher)
    result["launcher"]["wall_s"] = outcome.wall_s
    if result["status"] == "ok" and spec["device"] == "gpu" and result["environment"]["device"] != "gpu":
        # The kit refuses this itself; this catches a kit that did not.
        return failed("no-gpu", f"a GPU was asked for but the run used {result['environment']['device_name']}")
    return result

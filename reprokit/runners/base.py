"""The seam between the host and the kits: what a runner is given, what it returns.

A runner starts one kit process, ``python -m reprokit.kits.<module> ARGS`` (a
``KitCall``), somewhere: a local virtualenv, a given interpreter, a container.
Every runner gives the process the same things: the kit code and the data
read-only, the call's own input files read-only, and exactly one writable
folder, fresh and empty. It reports how the process ended as an ``Outcome``.

``run_spec`` is the training run (``reprokit.kits.run``) on top of that, and ``collect``
turns its outcome plus whatever the kit wrote into exactly one result dict, so
a failed run is recorded the same way whichever runner started it. The
certificate (``reprokit.kits.certify``), the benchmarks and the GPU check start their
processes through the same ``Runner.run``.
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from reprokit.environments import module_names, requirement_sets
from reprokit.environments.topology import Placement
from reprokit.kits.contract.names import PROGRESS_MARKER
from reprokit.kits.contract.spec import Spec
from reprokit.kits.framework_free import cpu_peak
from reprokit.results import results

LOG_TAIL_LINES = 40
RESULT_NAME = "result.json"

ProgressFn = Callable[[dict[str, Any]], None]

@dataclass(frozen=True)
class KitCall:
    """One kit process: ``python -m <module> <args>`` in one framework's environment.

    Path arguments are host paths; a runner shows each one where the process
    sees it (unchanged locally, under the container's mounts in Docker), so a
    path must lie in the kit code, the data folder, one of ``inputs`` or
    ``output``.
    """

    framework: str
    module: str                          # "reprokit.kits.run", "reprokit.kits.certify", "reprokit.kits.bench"
    args: tuple[str | Path, ...]
    output: Path                         # the one writable folder; the runner makes it fresh and empty
    inputs: tuple[Path, ...] = ()        # files or folders the process reads, besides the kit code and data
    timeout_s: float = 900.0
    label: str = "kit"                   # names its container and log lines: the run id of a training run
    placement: Placement | None = None   # its GPUs (one, or --devices N), CPU set and memory node; None: all assigned
    devices: int = 1                     # the devices the run holds (--devices): its ranks' shared memory in Docker


@dataclass
class Outcome:
    """How a kit process ended, as seen from outside it."""

    exit_code: int | None
    wall_s: float
    log_tail: list[str] = field(default_factory=list)
    timed_out: bool = False
    oom_killed: bool = False          # the kernel/engine killed it for host memory
    interrupted: bool = False         # Ctrl-C: never recorded as finished
    start_error: str | None = None    # why the process never started (an engine's refusal), in one sentence
    engine_lost: str | None = None    # the engine stopped answering mid-run: what happened, in one sentence
    launcher: dict[str, Any] = field(default_factory=dict)   # runner-specific facts (image id, interpreter, ...)


class Runner(Protocol):
    name: str
    data_dir: Path                       # the prepared datasets, shown read-only to every process

    def missing(self, frameworks: set[str]) -> list[str]:
        """Environments or images prepare() still has to build (for the time estimate)."""

    def prepare(self, frameworks: set[str]) -> None:
        """Build or check what the runs need; raise UserError before any run."""

    def describe(self, framework: str) -> dict[str, Any]:
        """Static facts recorded in every RunSpec (lock hash, image ref), part of its id."""

    def run(self, call: KitCall, on_progress: ProgressFn) -> Outcome:
        """Run one kit process to completion (or timeout) and say how it ended."""


def fresh_folder(path: Path) -> Path:
    """An empty folder at path: what a call writes never mixes with an earlier attempt's files."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def spec_call(spec: dict[str, Any], spec_path: Path, output: Path, data_dir: Path,
              placement: Placement | None = None) -> KitCall:
    """The training run of one spec, its result file in the call's output folder: ``reprokit.kits.run`` for a RunSpec,
    ``reprokit.kits.probe`` for a ScriptSpec, which also reads the script's folder (read-only, as every input). ``spec``
    is the spec as written at spec_path, the JSON the kit process reads (run_spec writes it; a certificate its own).
    A script's extra requirements are the set the host installed once in the per-user cache, read-only as every
    input (reprokit/environments/requirement_sets.py)."""
    args: tuple[str | Path, ...] = ("--spec", spec_path, "--out", output / RESULT_NAME, "--data-dir", data_dir)
    inputs: tuple[Path, ...] = (spec_path,)
    module = "reprokit.kits.run"
    if spec.get("source") == "script":
        folder = Path(spec["script"]["folder"])
        module, args, inputs = "reprokit.kits.probe", (*args, "--script-dir", folder), (spec_path, folder)
        for mount in spec["script"].get("mounts", ()):      # the user's own data (--data), read-only as inputs are
            args, inputs = (*args, "--mount", mount["at"], Path(mount["folder"])), (*inputs, Path(mount["folder"]))
        if installed := requirement_sets.for_spec(spec):
            args, inputs = (*args, "--requirements", installed), (*inputs, installed)
    return KitCall(spec["framework"], module, args, output=output, inputs=inputs,
                   timeout_s=spec["limits"]["timeout_s"], label=spec["run_id"], placement=placement,
                   devices=int(spec.get("devices", 1)))


def run_spec(runner: Runner, spec: Spec, work: Path, on_progress: ProgressFn,
             placement: Placement | None = None) -> dict[str, Any] | None:
    """One training run through the runner: exactly one result, None if interrupted (Ctrl-C).

    The spec becomes JSON here, for the kit process, and the result records it as written. With a placement,
    the result records it (launcher.placement): the GPU's UUID and the CPU set.
    """
    run_dir = fresh_folder(work / spec.run_id)
    spec_path = run_dir / "spec.json"
    written = spec.to_dict()
    spec_path.write_text(json.dumps(written, indent=1, sort_keys=True))
    call = spec_call(written, spec_path, run_dir / "out", runner.data_dir, placement)
    outcome = runner.run(call, on_progress)
    if outcome.interrupted:
        return None
    result = collect(written, outcome, call.output / RESULT_NAME)
    cpu_peak.remember(runner.data_dir, result)         # a CPU peak the run measured: the next run reads it
    if placement is not None:
        result.setdefault("launcher", {})["placement"] = placement.record()
    return result


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


# What a kit prints when its own writes find the disk full (errno 28, ENOSPC; 122 on a quota).
DISK_FULL_MARKERS = ("No space left on device", "[Errno 28]", "Disk quota exceeded")
GPU_OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "RESOURCE_EXHAUSTED", "OOM when allocating")


def collect(spec: dict[str, Any], outcome: Outcome, out_path: Path) -> dict[str, Any]:
    """One result dict for any outcome: the kit's own file if it is valid, else a failure. ``spec`` is the
    spec as the kit process was given it (JSON), which a failure's record keeps."""
    def failed(kind: str, message: str) -> dict[str, Any]:
        return results.failure(spec, kind, message, outcome.log_tail, outcome.wall_s, outcome.launcher)

    if outcome.engine_lost:
        return failed("engine-lost", outcome.engine_lost)
    if outcome.timed_out:
        return failed("timeout", f"the run exceeded its {spec['limits']['timeout_s']:.0f} s limit")
    if outcome.oom_killed:
        return failed("oom", "killed for lack of host memory (OOMKilled)")
    if outcome.start_error:
        return failed("error", outcome.start_error)
    text = out_path.read_text() if out_path.exists() else None
    if outcome.exit_code != 0:
        if text is None:
            log = "\n".join(outcome.log_tail)
            if any(m in log for m in GPU_OOM_MARKERS):
                return failed("gpu-oom", "the framework ran out of GPU memory")
            if any(m in log for m in DISK_FULL_MARKERS):
                return failed("disk-full", f"the kit's output folder {out_path.parent} is full (No space left on "
                                           f"device)")
            return failed("exit-code", f"the kit exited with status {outcome.exit_code}")
    if text is None:
        return failed("invalid-output", "the kit wrote no result file")
    try:
        result: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError as exc:
        return failed("invalid-output", f"the result file is not JSON ({exc})")
    problem = results.problems(result)
    if problem:
        return failed("invalid-output", f"the result file does not match the schema: {problem}")
    if result.get("run_id") != spec["run_id"]:
        return failed("invalid-output", "the result file belongs to another run")
    failure = result.get("failure") or {}
    if result["status"] != "ok" and any(m in failure.get("message", "") for m in DISK_FULL_MARKERS):
        failure["kind"] = "disk-full"            # the kit's own failure: its output folder filled up
    module_names.explain_missing(result)         # a failed import ends with the flag that adds its module
    result.setdefault("launcher", {}).update(outcome.launcher)
    result["launcher"]["wall_s"] = outcome.wall_s
    chose_cpu = spec.get("source") == "script" and any(f.get("code") == "model-not-on-gpu"
                                                       for f in result.get("findings") or [])
    if result["status"] == "ok" and spec["device"] == "gpu" and result["environment"]["device"] != "gpu" \
            and not chose_cpu:
        # The kit refuses this itself; this catches a kit that did not. A script that kept its model on the CPU
        # is measured there, as it chose, and says so in its finding.
        return failed("no-gpu", f"a GPU was asked for but the run used {result['environment']['device_name']}")
    return result

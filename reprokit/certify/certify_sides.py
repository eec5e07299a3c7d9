"""The certificate's framework processes ("sides"): one per framework and thread setting, each certifying the
jobs listed for it (``python -m reprokit.kits.certify --jobs``), the reference first, and saying as it goes which job
ended, in how many seconds, and how many are left."""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.kits.contract.names import REFERENCE, label
from reprokit.kits.framework_free import certificate as cert
from reprokit.runners.base import KitCall, Runner


@dataclass
class Job:
    """One pair of specs to certify in the framework processes, and what came back."""
    pair: int                          # the index of the pair it certifies
    specs: dict[str, dict[str, Any]]
    parts: str                         # "all", or "structure" (the costly checks run at a reduced width)
    result: dict[str, Any] = field(default_factory=dict)
    sides: dict[str, dict[str, Any]] = field(default_factory=dict)
    folders: dict[str, Path] = field(default_factory=dict)
    part: str = ""                     # which part of a pair certified at a reduced width, for the log

    def name(self) -> str:
        """What the log calls it: the experiment, the variant pair, and the part of a reduced pair."""
        variants = " / ".join(str(self.specs[fw].get("variant")) for fw in pair_of(self.specs))
        return f"{self.specs[REFERENCE]['experiment']} {variants}{f' ({self.part})' if self.part else ''}"


def pair_of(specs: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """The pair's frameworks, the reference first."""
    return REFERENCE, next(fw for fw in specs if fw != REFERENCE)


def run_jobs(jobs: list[Job], runner: Runner, works: list[Path], timeout_s: float, log: Callable[[str], None],
             steps: int, take: Callable[[Job, str, dict[str, Any] | None, str], None]) -> None:
    """One process per framework and thread setting (a process sets its thread pools once), each job's
    trajectories of ``steps`` steps; ``take(job, framework, side, text)`` keeps each side's findings, or why
    there are none."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        # by the pair's frameworks too: a group is one process per framework of one pair
        threads = {fw: job.specs[fw]["numerics"]["cpu_threads"] for fw in pair_of(job.specs)}
        groups.setdefault(json.dumps(threads, sort_keys=True), []).append(job)
    total = 2 * len(groups)
    for g, group in enumerate(groups.values()):
        batch = works[group[0].pair] / f"batch-{g}"
        for n, fw in enumerate(pair_of(group[0].specs)):     # the reference first: it exports the initial weights
            todo = [job for job in group if job.result["message"] is None]
            if not todo:
                break
            side = f"certificate side {2 * g + n + 1}/{total} ({label(fw)})"
            jobs_dir = batch / f"jobs-{fw}"
            jobs_dir.mkdir(parents=True, exist_ok=True)
            names = [str(jobs.index(job)) for job in todo]
            for name, job in zip(names, todo):
                (jobs_dir / f"spec-{name}.json").write_text(json.dumps(job.specs[fw]))
            (jobs_dir / "jobs.json").write_text(json.dumps(
                [{"name": name, "spec": f"spec-{name}.json", "parts": job.parts, "steps": steps}
                 for name, job in zip(names, todo)]))
            log(f"{side}: {len(todo)} job(s) running: {'; '.join(job.name() for job in todo)}")
            t0 = time.perf_counter()
            code, tail, launcher = run_side(fw, runner, jobs_dir, batch / fw, timeout_s * len(todo),
                                            batch / REFERENCE if fw != REFERENCE else None,
                                            _job_ended(side, dict(zip(names, todo)), log))
            log(f"{side}: ended in {time.perf_counter() - t0:.0f} s "
                f"({'timed out' if code is None else f'exit {code}'})")
            for name, job in zip(names, todo):
                job.folders[fw] = batch / fw / name
                job.result["ran_on"][fw]["image_id"] = (launcher.get("image") or {}).get("id")
                take(job, fw, *read_side(fw, job.folders[fw] / cert.SIDE_NAME, code, tail))


def _job_ended(side: str, by_name: dict[str, Job], log: Callable[[str], None]) -> Callable[[dict[str, Any]], None]:
    """The progress line of each job the kit reports as ended (reprokit/kits/certify.py: job, done, of, seconds,
    status)."""
    def on_progress(event: dict[str, Any]) -> None:
        job = by_name.get(str(event.get("job")))
        if event.get("phase") != "certificate" or job is None or "seconds" not in event:
            return
        left = int(event.get("of", 0)) - int(event.get("done", 0))
        log(f"{side}: {job.name()}: {event.get('status')} in {float(event['seconds']):.0f} s; "
            f"{left} job(s) left in this process")
    return on_progress


def run_side(fw: str, runner: Runner, jobs_dir: Path, out: Path, timeout_s: float, weights_from: Path | None,
             on_progress: Callable[[dict[str, Any]], None]) -> tuple[int | None, str, dict[str, Any]]:
    """One framework process for the jobs listed in ``jobs_dir/jobs.json``, through the runner: its exit
    status (None: it timed out), its log's tail and the launcher's facts. Job i writes ``out/i/``."""
    extra = ("--weights-from", weights_from) if weights_from else ()
    call = KitCall(fw, "reprokit.kits.certify", ("--jobs", jobs_dir / "jobs.json", "--out-dir", out,
                                        "--data-dir", runner.data_dir, *extra),
                   output=out, inputs=(jobs_dir, *((weights_from,) if weights_from else ())), timeout_s=timeout_s,
                   label=f"certify-{fw}")
    outcome = runner.run(call, on_progress)
    if outcome.interrupted:
        raise KeyboardInterrupt
    tail = "\n".join(outcome.log_tail[-15:])
    if outcome.timed_out:
        return None, f"the {label(fw)} certificate did not finish within {timeout_s:.0f} s", outcome.launcher
    return outcome.exit_code, tail, outcome.launcher


def read_side(fw: str, path: Path, code: int | None, tail: str) -> tuple[dict[str, Any] | None, str]:
    if code is None:
        return None, tail
    try:
        return json.loads(path.read_text()), tail
    except (OSError, json.JSONDecodeError):
        return None, f"the {label(fw)} certificate exited with {code} and wrote no readable {path.name}:\n{tail}"

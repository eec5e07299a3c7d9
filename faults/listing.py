"""The fault suite's independent listings: what is on disk and what runs, read without the kit's own code.

A fault is judged by these, not by what the kit says of itself: the finished result files and their bytes,
the kit's processes, and everything a fault could leave behind (processes, containers, mounts, half-written files).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

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
    return {pid: cmd for pid, cmd in _processes(str(state / "work")).items() if " -m reprokit.kits." in cmd}


def docker_ids(*args: str) -> list[str]:
    """What a `docker ps -q` prints, id by id (none where Docker is missing or refuses)."""
    if shutil.which("docker") is None:
        return []
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60)
    return proc.stdout.split() if proc.returncode == 0 else []


def snapshot(scratch: Path) -> set[str]:
    """Everything a fault could leave behind, as lines: processes, containers, mounts, temporary files."""
    things = {f"process {pid}: {cmd[:100]}" for pid, cmd in _processes(str(scratch)).items()}
    things |= {f"container {c}" for c in docker_ids("ps", "-aq", "--filter", "label=reprokit=1")}
    with open("/proc/self/mounts") as fh:
        things |= {f"mount {line.split()[1]}" for line in fh if line.split()[1].startswith(str(scratch))}
    things |= {f"half-written file {p}" for p in scratch.rglob(".*.tmp")}
    return things

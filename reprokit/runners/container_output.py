"""What a finished or running container leaves for its result: its output and its lifetime.

The Docker runner forwards a container's output as it comes, line by line
(progress events to the display, the rest to the result's log tail), and reads
the kit process's lifetime from the engine's own timestamps, so a result can
tell the orchestrator's cost from the process's.
"""
from __future__ import annotations

import codecs
import re
from typing import TYPE_CHECKING, Any

from reprokit.kits.contract.names import PROGRESS_MARKER
from reprokit.runners.base import ProgressFn, split_line

if TYPE_CHECKING:
    from docker.models.containers import Container

TAIL_LINE_CHARS = 2000


def pump(container: Container, on_progress: ProgressFn, tail: list[str]) -> None:
    """Forward the container's output line by line: progress events out, the rest to the tail.

    The client's read timeout does not cut a quiet stream (a first PTX compile, fp64 certificate parts):
    the SDK lifts the socket's timeout on a followed, multiplexed log stream (APIClient's
    _multiplexed_response_stream_helper), and tests/test_docker_runner.py holds it to a silence longer
    than the client's timeout."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    buf = ""

    def emit(line: str) -> None:
        try:
            split_line(line[:TAIL_LINE_CHARS] if not line.startswith(PROGRESS_MARKER) else line,
                       on_progress, tail)
        except Exception as exc:  # noqa: BLE001 - a broken progress display must not lose the run
            tail.append(f"(reprokit: the progress display failed: {exc!r})")

    try:
        for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
            buf += decoder.decode(chunk)
            *lines, buf = buf.split("\n")
            for line in lines:
                emit(line)
    except Exception:  # noqa: BLE001, S110 - the container was removed under us (timeout, Ctrl-C)
        pass
    buf += decoder.decode(b"", final=True)
    if buf:
        emit(buf)


def lifetime(state: dict[str, Any]) -> float | None:
    """Seconds between the engine's StartedAt and FinishedAt of a container (None if unknown)."""
    from datetime import datetime

    def parse(text: str | None) -> datetime | None:
        if not text or text.startswith("0001-"):
            return None
        m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text)
        if not m:
            return None
        frac = (m.group(2) or "0")[:6].ljust(6, "0")
        zone = "+00:00" if m.group(3) == "Z" else m.group(3)
        return datetime.fromisoformat(f"{m.group(1)}.{frac}{zone}")

    start, end = parse(state.get("StartedAt")), parse(state.get("FinishedAt"))
    return (end - start).total_seconds() if start and end else None

"""What the person at the terminal sees while a matrix runs."""
from __future__ import annotations

import sys
import time


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class RunProgress:
    """One status line per run, rewritten in place on a terminal, every 15 s in a log."""

    def __init__(self, label: str, stream=sys.stdout) -> None:
        self.label = label
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self._last_print = 0.0

    def __call__(self, event: dict) -> None:
        parts = [self.label]
        if "epoch" in event:
            parts.append(f"epoch {event['epoch']}/{event['epochs']}")
        if event.get("phase") == "train":
            parts.append(f"step {event['step']}/{event['steps']}")
        if event.get("test_accuracy") is not None:
            parts.append(f"test acc {event['test_accuracy']:.3f}")
        parts.append(duration(time.monotonic() - self.t0))
        line = " · ".join(parts)
        if self.tty:
            self.stream.write("\r\033[K" + line)
            self.stream.flush()
        elif time.monotonic() - self._last_print >= 15 or event.get("phase") == "epoch":
            self._last_print = time.monotonic()
            print(line, file=self.stream, flush=True)

    def done(self, status: str) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
        print(f"{self.label} · {status} · {duration(time.monotonic() - self.t0)}", file=self.stream, flush=True)

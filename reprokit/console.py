"""What the person at the terminal sees while a matrix runs: the plan, and each run with its ETA."""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def fraction_done(event: dict[str, Any]) -> float | None:
    """How far a run is, from the kit's progress events (epochs, then steps within one)."""
    if not event.get("epochs"):
        return None
    epoch = event.get("epoch", 1)
    within = event["step"] / event["steps"] if event.get("phase") == "train" and event.get("steps") else 1.0
    done: float = min(1.0, (epoch - 1 + within) / event["epochs"])
    return done


def run_label(spec: Any) -> str:
    """A run as its progress line names it: experiment, framework, variant and repeat, and its devices beyond one."""
    at = f" at {spec.devices} devices" if spec.devices > 1 else ""
    return f"{spec.experiment} / {spec.framework} / {spec.variant} r{spec.repeat}{at}"


class RunProgress:
    """One status line per run, rewritten in place on a terminal, every 15 s in a log.

    The run's ETA comes from its own progress once a tenth of it is done, before that
    from its estimate; the matrix's adds the estimates of the runs after it.
    """

    def __init__(self, label: str, estimate_s: float | None = None, after_s: float | None = 0.0,
                 stream: TextIO = sys.stdout) -> None:
        self.label = label
        self.estimate_s = estimate_s
        self.after_s = after_s
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self._last_print = 0.0

    def eta(self, event: dict[str, Any]) -> tuple[float | None, float | None]:
        elapsed = time.monotonic() - self.t0
        done = fraction_done(event)
        left: float | None
        if done and done >= 0.1:
            left = elapsed / done - elapsed
        else:
            left = None if self.estimate_s is None else max(self.estimate_s - elapsed, 0.0)
        matrix = None if left is None or self.after_s is None else left + self.after_s
        return left, matrix

    def __call__(self, event: dict[str, Any]) -> None:
        parts = [self.label]
        if "epoch" in event:         # a probed script's epochs and steps may be unbounded: "?"
            parts.append(f"epoch {event['epoch']}/{event.get('epochs') or '?'}")
        if event.get("phase") == "train":
            parts.append(f"step {event['step']}/{event.get('steps') or '?'}")
        if event.get("test_accuracy") is not None:
            parts.append(f"test acc {event['test_accuracy']:.3f}")
        parts.append(duration(time.monotonic() - self.t0))
        left, matrix = self.eta(event)
        if left is not None:
            parts.append(f"ETA {duration(left)}" + (f", matrix {duration(matrix)}" if self.after_s else ""))
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

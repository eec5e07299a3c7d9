"""What runs now: each kit process group and container a runner has started and not yet cleaned up.

A first Ctrl-C lets each runner clean up after itself (kill its process group, remove its container).
A second one must stop at once and still leave nothing behind, so every runner registers what it
started here for as long as it runs, and ``stop_all`` ends them all without waiting for anything else.
"""
from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator

_stoppers: dict[str, Callable[[], None]] = {}


@contextlib.contextmanager
def running(key: str, stop: Callable[[], None]) -> Iterator[None]:
    """While the block runs, ``stop_all`` calls stop(), which must return within a second or two."""
    _stoppers[key] = stop
    try:
        yield
    finally:
        _stoppers.pop(key, None)


def process_group(pgid: int) -> contextlib.AbstractContextManager[None]:
    """A kit process started in a session of its own: SIGKILL to its whole group stops it and its children."""
    def stop() -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    return running(f"pgid:{pgid}", stop)


def stop_all() -> list[str]:
    """Stop everything registered, each stopper's failure aside; the keys of what was stopped."""
    stopped = []
    for key, stop in list(_stoppers.items()):
        with contextlib.suppress(Exception):
            stop()
            stopped.append(key)
        _stoppers.pop(key, None)
    return stopped

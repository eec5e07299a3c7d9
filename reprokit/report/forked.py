"""Jobs that read one large object, run in forked processes beside the caller's own work where forking is safe.

A report's figures take most of its time, each on one core; a forked worker inherits the results they are drawn
from without copying or pickling them, where a spawned one would import the kit and be sent the results first.
Forking is safe only on Linux (macOS's system libraries are not fork-safe) and only while this process has no
other Python thread: the child holds only the forking thread, so a lock another thread held there stays held.
Elsewhere, on one core, or for one job, the jobs run here in turn, with the same results.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

Job = TypeVar("Job")
Out = TypeVar("Out")

_shared: Any = None       # a worker's copy of what every job reads, set once as it starts
PR_SET_PDEATHSIG = 1      # prctl(2): the signal a process gets when the thread that forked it ends


@contextmanager
def side_by_side(fn: Callable[[Any, Job], Out], shared: Any, jobs: Sequence[Job]
                 ) -> Iterator[Callable[[], list[Out]]]:
    """Runs [fn(shared, job) for job in jobs] while the caller goes on, in forked workers (one per core, at most
    one per job) where that is safe, else when asked; yields what waits for and returns their results. fn, each
    job and each result are pickled, shared is inherited."""
    workers = min(len(jobs), len(os.sched_getaffinity(0))) if sys.platform == "linux" else 1
    if workers < 2 or threading.active_count() > 1:
        yield lambda: [fn(shared, job) for job in jobs]
        return
    # all workers are forked before the pool starts its own thread (CPython does so for the fork context)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_keep,
                             initargs=(shared, os.getpid())) as pool:
        futures = [pool.submit(_call, fn, job) for job in jobs]
        yield lambda: [f.result() for f in futures]


def _keep(shared: Any, parent: int) -> None:
    """A worker's start: it ends with the process that forked it, even one killed outright (a second Ctrl-C exits
    at once, without waiting for it), where it would otherwise wait on its pool's queue for ever."""
    global _shared
    _shared = shared
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:       # that process ended before the line above
        os._exit(1)


def _call(fn: Callable[[Any, Job], Out], job: Job) -> Out:
    return fn(_shared, job)

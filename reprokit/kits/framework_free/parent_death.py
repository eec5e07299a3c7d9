"""A process that dies with its parent: a kit process (or a run's own process) must not train on, unowned and
timed beside the next command's runs, after its orchestrator was killed with ``kill -9``.

Linux's ``prctl(PR_SET_PDEATHSIG)`` has the kernel send SIGKILL when the parent ends. It follows the parent
*thread* that forked the process, so the parent forks from a thread that outlives the child, and it does not
reach the process's own children. Elsewhere nothing is armed.

A run's slot process (reprokit/execute/schedule.py) arms it itself; a local kit process, in reprokit/kits/launch.py,
which starts it. Standard library only.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1              # <linux/prctl.h>

# Loaded in the parent: after a fork, only calls into what is loaded already are safe.
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def arm(parent: int) -> None:
    """SIGKILL this process when its parent ends, or now if the parent (pid ``parent``) has already: it may have
    died before this call, and then getppid() names another process."""
    if _libc is None:
        return
    if _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)

"""Ctrl-C and SIGTERM, handled the same way in every process of a command that starts runs.

The first signal raises KeyboardInterrupt where the process is: each runner's own clean-up runs
(the kit's process group killed, the container removed), finished results are kept, and the
command says what to run to go on. A second signal stops at once: everything registered in
``runners.live`` is ended and the process exits with 130, without waiting for anything.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType

from reprokit.execute import locks
from reprokit.execute.locks import command_line
from reprokit.runners import live

STOPPED = 130                   # the shell's status for a command ended by SIGINT

_signals = 0
_command = True                 # the command's own process says what to run; a --parallel slot's stays quiet


def install(terminal: bool = True) -> None:
    """Handle SIGINT and SIGTERM from here on. ``terminal=False`` (a ``--parallel`` slot's process) leaves the
    terminal's Ctrl-C, which reaches the whole process group, to the parent, which passes each signal on once."""
    global _signals, _command
    _signals, _command = 0, terminal
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop if terminal else signal.SIG_IGN)


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """The command's own handlers while it runs, and the caller's again after (a test, or a program that calls
    ``cli.main``, keeps its own Ctrl-C). Once a signal came they stay: the command is ending, and a second
    signal must still stop it at once, not as the caller's default would."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    install()
    try:
        yield
    finally:
        if not _signals:
            signal.signal(signal.SIGINT, before[0] if before[0] is not None else signal.SIG_DFL)
            signal.signal(signal.SIGTERM, before[1] if before[1] is not None else signal.SIG_DFL)


def _stop(signum: int, frame: FrameType | None) -> None:
    global _signals
    _signals += 1
    if _signals == 1:
        raise KeyboardInterrupt
    live.stop_all()
    locks.release_all()         # the next command then finds them free, not left by a process that died
    if _command:
        print(f"\nstopped at once ({signal.Signals(signum).name} again); finished results are kept. To go on, "
              f"run: {command_line()}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(STOPPED)


def stopped() -> bool:
    """Whether a signal came: the command is ending."""
    return _signals > 0


def exit_stopped(code: int) -> None:
    """End a stopped command's process now. Python puts the signals' default handlers back while it shuts down, so a
    second Ctrl-C in those last moments would kill it (status -2) instead of ending it with 130: run the exit
    functions while this module's handlers still hold (a second signal meanwhile ends it at once), then leave."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def resume_line(where: str = "") -> str:
    """What an interrupted command says: its finished results are kept (``where``: " in FOLDER (N of M runs)"), and
    the exact command line that goes on."""
    return f"interrupted: finished results are kept{where}. To go on, run: {command_line()}"

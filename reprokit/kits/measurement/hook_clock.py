"""The time the probe's own code takes on a script's path (reprokit/kits/observation/observe.py): its direct cost per
step."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from reprokit.kits.framework_free.measure import now

P = ParamSpec("P")
R = TypeVar("R")


class HookClock:
    """The time the probe's own code takes on the script's path (hooks, counting, bookkeeping; the outermost
    hook call counts, so nested ones are not counted twice): the probe's direct cost per step. The Observer
    keeps what it took over the measured steps (after warmup: a trace's one-off work is not a step's)."""

    seconds = 0.0
    _depth = 0
    _waited = 0.0         # device waits inside the current outer hook, taken off when it ends (so a reading
                          # between hooks never holds a wait's subtraction without its hook's addition)


def own_time(fn: Callable[P, R]) -> Callable[P, R]:
    """Count a hook's time on HookClock."""
    @functools.wraps(fn)
    def timed(*args: P.args, **kwargs: P.kwargs) -> R:
        if HookClock._depth:
            return fn(*args, **kwargs)
        HookClock._depth += 1
        t0 = now()
        try:
            return fn(*args, **kwargs)
        finally:
            HookClock.seconds += now() - t0 - HookClock._waited
            HookClock._waited = 0.0
            HookClock._depth -= 1
    return timed


def unclocked(fn: Callable[P, R]) -> Callable[P, R]:
    """A wait for the device inside a hook (a kit run's timing waits as long, at the same edges): not the probe's
    own work, so HookClock leaves it out."""
    @functools.wraps(fn)
    def waits(*args: P.args, **kwargs: P.kwargs) -> R:
        t0 = now()
        try:
            return fn(*args, **kwargs)
        finally:
            if HookClock._depth:
                HookClock._waited += now() - t0
    return waits

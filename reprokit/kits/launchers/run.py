"""A script's launcher, run under the probe where the script would run: ``python -m MODULE OPTIONS SCRIPT ARGS``.

The probe (reprokit/kits/probe.py) calls ``run`` in its own process in place of running the script. The launcher named
in the spec (reprokit/kits/contract/spec.py Launcher; reprokit/kits/contract/launchers.py) runs as ``python -m`` runs
its module, with the spec's options, then the script's path relative to the run's work folder (or ``-m MODULE``) and the
script's arguments; it starts the script's ranks as new Python processes, which the probe follows
(reprokit/kits/ranks/). The launcher's options are the user's, with the changes the plan declared (``{devices}`` read as
the run's device count, the loopback address where none was given) and one made here: a rendezvous port already in use
on this machine is replaced by a free one, and declared. Standard library only: the launcher's own module (torch's,
accelerate's, lightning's) is imported when it runs.
"""
from __future__ import annotations

import runpy
import socket
import sys

from reprokit.kits.contract import launchers
from reprokit.kits.contract.launchers import LOOPBACK, Kind
from reprokit.kits.contract.spec import Launcher, ScriptSpec

_STANDALONE = "--standalone"


def _port_option(kind: Kind, options: list[str]) -> tuple[str, int] | None:
    """The option that fixes the port the launcher's rendezvous listens on, and that port; None where the launcher
    finds a free one itself (torchrun ``--standalone``, and torchrun on one node without a port since torch 2.5)."""
    endpoint = launchers.value(options, kind.endpoint)
    if endpoint is not None:
        return _spelled(options, kind.endpoint), launchers.host_and_port(endpoint)[1] or kind.default_port
    port = launchers.value(options, kind.port)
    if kind.module == "torch.distributed.run" and (port is None or launchers.given(options, (_STANDALONE,))):
        return None
    return _spelled(options, kind.port), int(port) if port is not None else kind.default_port


def _spelled(options: list[str], names: tuple[str, ...]) -> str:
    """The option as the user spelled it (--master_port or --master-port), else its first spelling."""
    return next((n for n in names if launchers.given(options, (n,))), names[0])


def in_use(port: int) -> bool:
    """Whether a process listens on the port on loopback (or on every address): a bind as the launcher's own
    store binds it (SO_REUSEADDR, so a closed connection's TIME_WAIT does not count) is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            return True
    return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def with_free_port(launcher: Launcher) -> tuple[list[str], str | None]:
    """The launcher's options with its rendezvous port free on this machine, and the declaration where it was
    replaced (None where it was free, or where the launcher picks a free one itself)."""
    kind = launchers.kind(launcher.name)
    fixed = _port_option(kind, launcher.options)
    if fixed is None or not in_use(fixed[1]):
        return list(launcher.options), None
    option, port = fixed
    new = str(free_port())
    if option in kind.endpoint:
        new = f"{launchers.host_and_port(launchers.value(launcher.options, kind.endpoint) or LOOPBACK)[0]}:{new}"
    options = launchers.with_value(launcher.options, kind.endpoint if option in kind.endpoint else kind.port, new)
    return options, (f"port {port} on this machine is in use: {launcher.name}'s rendezvous takes a free one "
                     f"({option} {new})")


def command(spec: ScriptSpec, options: list[str]) -> list[str]:
    """The launcher's command line after ``python -m MODULE``: its options, the script (its path relative to the
    work folder, or ``-m MODULE``), the script's arguments."""
    script = ["-m", spec.script.module] if spec.script.module else [spec.script.path]
    return [*options, *script, *map(str, spec.script.args)]


def run(spec: ScriptSpec, shims: list[str]) -> None:
    """Run the spec's launcher in this process, from the run's work folder (the current one), as ``python -m``
    runs it; what the plan and this run changed of its options is declared in ``shims``. Returns when the launcher
    does: after its processes ended (it raises where one failed)."""
    launcher = spec.script.launcher
    assert launcher is not None, "run only a spec that has a launcher"
    kind = launchers.kind(launcher.name)
    options, moved = with_free_port(launcher)
    args = command(spec, options)
    count = f"{launcher.processes} process{'es' if launcher.processes != 1 else ''}"
    shims += [f"runs through {launcher.name} ({count}), as python -m {kind.module} {' '.join(args)}",
              *launcher.declared, *filter(None, [moved])]
    sys.argv = [kind.module, *args]
    runpy.run_module(kind.module, run_name="__main__", alter_sys=True)

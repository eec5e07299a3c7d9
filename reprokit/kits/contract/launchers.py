"""The launchers a script may be started through, as users type them, and what host and kit both read of them.

A script value ``FRAMEWORK=[LAUNCHER] (PATH | -m MODULE) [ARGS]`` names one of these before the script
(docs/scripts.md, "Launchers"). The host reads a launcher's options to count the processes it starts and to
refuse a rendezvous off this machine (reprokit/plan/launchers.py); the kit runs its module under the probe, as
``python -m MODULE OPTIONS SCRIPT ARGS``, with its rendezvous port free (reprokit/kits/launchers/). Standard library
only.
"""
from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass

# The framework whose scripts start their ranks through these launchers (its N devices are N processes).
FRAMEWORK = "pytorch"
# Written in a count option, it is replaced by the run's device count (--devices N), declared.
DEVICES = "{devices}"
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Kind:
    """One launcher: how users type it, the module ``python -m`` runs for it, its rendezvous options (the host's,
    or host:port for an endpoint), the port it uses where none is given, and the distributions it comes from."""
    name: str                        # as typed and reported: "torchrun", "accelerate launch"
    module: str
    address: tuple[str, ...]         # options naming the rendezvous host
    endpoint: tuple[str, ...]        # options naming host:port
    port: tuple[str, ...]            # options naming the port; the first is the one the kit writes
    default_port: int
    packages: tuple[str, ...]        # the distributions a run needs for it (besides the framework's lock)
    runs_modules: bool = True        # whether it runs -m MODULE as well as a path
    after: tuple[str, ...] = ()      # its options (each with a value) that it also takes after the script

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(self.name.split())


_TORCHRUN = Kind("torchrun", "torch.distributed.run", ("--master-addr", "--master_addr"),
                 ("--rdzv-endpoint", "--rdzv_endpoint"), ("--master-port", "--master_port"), 29500, ())
KINDS = (
    _TORCHRUN,
    dataclasses.replace(_TORCHRUN, name="python -m torch.distributed.run"),
    # accelerate reads --main_process_ip and --main-process-ip alike (it turns hyphens into underscores)
    Kind("accelerate launch", "accelerate.commands.launch", ("--main_process_ip", "--main-process-ip"), (),
         ("--main_process_port", "--main-process-port"), 29500, ("accelerate",)),
    # `fabric run SCRIPT` is the click command that `python -m lightning.fabric.cli SCRIPT` runs; it needs click,
    # which lightning does not require
    # (its click command reads options anywhere: `fabric run train.py --devices 2`, as Lightning's docs write it)
    Kind("fabric run", "lightning.fabric.cli", ("--main-address", "--main_address"), (),
         ("--main-port", "--main_port"), 29400, ("lightning", "click"), runs_modules=False,
         after=("--accelerator", "--strategy", "--devices", "--num-nodes", "--num_nodes", "--node-rank", "--node_rank",
                "--main-address", "--main_address", "--main-port", "--main_port", "--precision")),
)
NAMES = tuple(kind.name for kind in KINDS)
# What starts a script's ranks without a launcher: a call of these names in a module that imports the library (a
# trainer's only where it is given devices=).
SPAWNS = ("torch.multiprocessing", ("spawn", "start_processes"))
TRAINERS = (("lightning", "pytorch_lightning"), ("Trainer", "Fabric"))


def kind(name: str) -> Kind:
    return next(k for k in KINDS if k.name == name)


def value(options: list[str], names: tuple[str, ...]) -> str | None:
    """The last value given to one of ``names`` (``--opt V`` or ``--opt=V``), as the launcher's parser takes it."""
    found = None
    for i, word in enumerate(options):
        option, eq, given = word.partition("=")
        if option in names:
            found = given if eq else (options[i + 1] if i + 1 < len(options) else None)
    return found


def given(options: list[str], names: tuple[str, ...]) -> bool:
    return any(word.partition("=")[0] in names for word in options)


def with_value(options: list[str], names: tuple[str, ...], new: str) -> list[str]:
    """The options with every value of ``names`` replaced by ``new``; the first name added where none is given."""
    out, i = [], 0
    while i < len(options):
        option, eq, _ = options[i].partition("=")
        if option in names and eq:
            out.append(f"{option}={new}")
        elif option in names:
            out += [option, new]
            i += 1
        else:
            out.append(options[i])
        i += 1
    return out if given(options, names) else [*out, names[0], new]


def host_and_port(endpoint: str) -> tuple[str, int | None]:
    """An endpoint's host and port: ``host``, ``host:port``, ``[::1]:port``."""
    if endpoint.startswith("["):
        host, _, rest = endpoint[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    host, colon, port = endpoint.rpartition(":")
    if not colon or ":" in host:           # no port, or a bare IPv6 address
        return endpoint, None
    return host, int(port) if port.isdigit() else None


def is_loopback(host: str) -> bool:
    """Whether a rendezvous host is this machine's loopback (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

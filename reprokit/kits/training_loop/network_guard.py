"""The run's network guard: what would leave the machine is refused, local traffic works.

A run has no network (in a container none exists), so a local run refuses the same connections, and a
script that tries to download fails alike on both runners, with the address it tried. Only traffic that
leaves the machine is refused: internet-family connections to addresses other than this host's, and
look-ups of names other than this host's. Unix sockets and socket pairs (a DataLoader's workers,
``multiprocessing``), loopback and ``localhost`` (a local server, ``torch.distributed`` on one host) work.
"""
from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import tempfile
from collections.abc import Callable
from functools import cache
from typing import Any

NO_NETWORK = ("the run has no network: the kit serves MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 where their "
              "APIs look (`nox -s data -- NAME` stages them); show other data to the script with --data")
_INTERNET = (socket.AF_INET, socket.AF_INET6)
_real_getaddrinfo = socket.getaddrinfo


class NoNetwork(OSError):
    """A connection the script tried that would leave the machine."""


@cache
def _host_names() -> frozenset[str]:
    names = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", socket.gethostname()}
    return frozenset(n.lower() for n in names)


@cache
def _host_addresses() -> frozenset[str]:
    """This host's own addresses, as its name resolves locally (/etc/hosts; in a container, its own)."""
    try:
        return frozenset(str(info[4][0]) for info in _real_getaddrinfo(socket.gethostname(), None))
    except OSError:
        return frozenset()


def _is_local_address(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified or host in _host_addresses()


def is_local(host: object) -> bool:
    """Whether a host (a name, an address, or None for this host) stays on this machine."""
    if host is None or host == "":
        return True
    text = host.decode() if isinstance(host, bytes) else str(host)
    return text.lower().rstrip(".") in _host_names() or _is_local_address(text)


def block_network(tried: list[str]) -> str:
    """Refuse what would leave the machine, recording each address tried; returns the shim's declaration."""
    def refuse(target: object) -> NoNetwork:
        tried.append(":".join(map(str, target[:2])) if isinstance(target, tuple) else str(target))
        return NoNetwork(NO_NETWORK)

    def guarded(real: Callable[..., Any]) -> Callable[..., Any]:
        def connect(sock: socket.socket, address: Any, *args: Any, **kwargs: Any) -> Any:
            if sock.family in _INTERNET and isinstance(address, tuple) and not is_local(address[0]):
                raise refuse(address)
            return real(sock, address, *args, **kwargs)
        return connect

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_local(host) and not _is_address(host):
            raise refuse((host, port))
        return _real_getaddrinfo(host, port, *args, **kwargs)

    socket.socket.connect = guarded(socket.socket.connect)           # type: ignore[method-assign]
    socket.socket.connect_ex = guarded(socket.socket.connect_ex)     # type: ignore[method-assign]
    def by_name(real: Callable[..., Any]) -> Callable[..., Any]:
        def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
            if not is_local(host) and not _is_address(host):
                raise refuse(host)
            return real(host, *args, **kwargs)
        return lookup

    socket.getaddrinfo = getaddrinfo                                  # create_connection, urllib, asyncio use it
    socket.gethostbyname = by_name(socket.gethostbyname)
    socket.gethostbyname_ex = by_name(socket.gethostbyname_ex)
    return ("connections and name look-ups that would leave the machine refused (the run has no network, as in a "
            "container); local traffic (Unix sockets, loopback, localhost) works")


def _is_address(host: object) -> bool:
    """A numeric address is no look-up: connect decides whether it leaves the machine."""
    try:
        ipaddress.ip_address((host.decode() if isinstance(host, bytes) else str(host)).split("%")[0])
    except ValueError:
        return False
    return True


# A Unix socket's path holds 107 bytes; multiprocessing binds its listeners at TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX.
SOCKET_PATH_ROOM = 107 - len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def sockets_fit() -> list[str]:
    """Where the run's TMPDIR (inside its state folder) is too deep for a Unix socket's path, multiprocessing's
    listeners (a DataLoader's workers handing tensors over) bind in Linux's abstract socket namespace instead:
    no file and no path limit, the same connection. Returns the shim's declaration, if one was needed."""
    if len(tempfile.gettempdir()) <= SOCKET_PATH_ROOM:
        return []
    from multiprocessing import connection
    real = getattr(connection, "arbitrary_address")    # noqa: B009 - not in typeshed's stubs

    def arbitrary_address(family: str) -> Any:
        if family == "AF_UNIX":
            return f"\0listener-{os.getpid()}-{secrets.token_hex(8)}"
        return real(family)
    setattr(connection, "arbitrary_address", arbitrary_address)    # noqa: B010 - as above
    return ["multiprocessing's listeners bind in Linux's abstract socket namespace (the run's TMPDIR is too deep "
            "for a socket's path)"]

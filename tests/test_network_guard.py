"""The run's network guard (reprokit/kits/training_loop/network_guard.py) refuses only what would leave the machine.

Each check runs in a fresh interpreter with the guard installed, as the probe installs it, and uses real
sockets: a Unix socket pair, a multiprocessing pool (its workers talk over Unix sockets), a server on the
loopback reached by address and by ``localhost``, and look-ups and connections that would leave the host.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

from checkout import REPO

GUARDED = textwrap.dedent("""
    import multiprocessing, socket, threading, urllib.request
    from reprokit.kits.training_loop.network_guard import NoNetwork, block_network

    tried = []
    block_network(tried)

    a, b = socket.socketpair()
    a.sendall(b"x"); assert b.recv(1) == b"x"

    with multiprocessing.get_context("spawn").Pool(2) as pool:    # workers reach the parent over Unix sockets
        assert pool.map(abs, [-1, -2]) == [1, 2]

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    threading.Thread(target=lambda: server.accept()[0].sendall(b"ok"), daemon=True).start()
    assert socket.create_connection(("localhost", port)).recv(2) == b"ok"
    threading.Thread(target=lambda: server.accept()[0].sendall(b"ok"), daemon=True).start()
    assert socket.create_connection(("127.0.0.1", port)).recv(2) == b"ok"
    assert tried == [], tried

    for attempt in (lambda: urllib.request.urlopen("https://download.pytorch.org/x", timeout=5),
                    lambda: socket.getaddrinfo("example.com", 443),
                    lambda: socket.gethostbyname("example.com"),
                    lambda: socket.create_connection(("192.0.2.1", 80), timeout=5),
                    lambda: socket.socket(socket.AF_INET6).connect(("2001:db8::1", 80, 0, 0))):
        try:
            attempt()
        except NoNetwork:
            continue
        except OSError as exc:            # urllib wraps the refusal in a URLError that keeps it as its reason
            assert isinstance(getattr(exc, "reason", None), NoNetwork), exc
            continue
        raise AssertionError("not refused")
    print(tried)
""")


def test_local_traffic_works_and_only_what_leaves_the_machine_is_refused():
    proc = subprocess.run([sys.executable, "-c", GUARDED], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("['download.pytorch.org:443', 'example.com:443', 'example.com', '192.0.2.1:80', "
                                   "'2001:db8::1:80']")


def test_a_deep_tmpdir_still_gives_multiprocessing_its_unix_sockets(tmp_path):
    """A state folder deep in a project tree makes the run's TMPDIR too long for a socket's path: the listeners a
    DataLoader's workers hand tensors over by then bind in the abstract namespace, and still connect."""
    deep = tmp_path / ("a-folder-deep-in-a-project-tree" * 3)
    deep.mkdir()
    script = textwrap.dedent("""
        from multiprocessing.connection import Client, Listener
        from reprokit.kits.training_loop.network_guard import block_network, sockets_fit
        block_network([])
        said = sockets_fit()
        with Listener(family="AF_UNIX") as listener:
            with Client(listener.address) as client, listener.accept() as served:
                client.send("batch")
                assert served.recv() == "batch"
        print(said)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"TMPDIR": str(deep), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert "abstract socket namespace" in proc.stdout
    assert not list(deep.iterdir()) or all(p.name.startswith("pymp-") for p in deep.iterdir())

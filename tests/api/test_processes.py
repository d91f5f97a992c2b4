"""api/processes.py: the API's processes each listen on a socket of their own (SO_REUSEPORT) — a
port another program holds is refused before any starts, and a connection accepted on such a socket
is a TCP one to asyncio (TCP_NODELAY set: a reply is not held back waiting on the client's ACK).
That two processes share a burst of connections and a dead one is replaced: tests/api/test_serve.py."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from api import processes
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_a_port_another_program_listens_on_is_refused() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(processes.PortTaken, match=f"cannot listen on 127.0.0.1:{port}"):
            processes.listening_address("127.0.0.1", port)


def test_a_port_already_in_a_reuse_port_group_is_refused_too() -> None:
    # Another launcher's processes: joining their group would split its traffic with them silently.
    family, address = processes.listening_address("127.0.0.1", 0)
    with processes.reuse_port_socket(family, address) as other:
        other.listen()
        with pytest.raises(processes.PortTaken):
            processes.listening_address(*address)


def test_a_group_sees_its_own_listeners_and_another_launchers_bound_in_the_same_moment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two launchers that both probed the port free, then both bound: the kernel puts the same user's
    SO_REUSEPORT sockets in one group, and they would split its connections silently. Once a group
    listens, a listener on the port that is not its own refuses it."""
    group = processes.ListeningGroup("127.0.0.1", 0)
    family, address = group.family, group.address
    own = group.sockets(2)
    try:
        assert sorted(processes.listeners_on(family, address)) == sorted(
            os.fstat(s.fileno()).st_ino for s in own)
        (later,) = group.sockets(1)  # a process's replacement: the group's own sockets are not foreign
        later.close()
    finally:
        for sock in own:
            sock.close()
    assert processes.listeners_on(family, address) == []
    with processes.reuse_port_socket(family, address) as other:  # bound after the probe below passed
        other.listen()
        monkeypatch.setattr(processes, "listening_address", lambda host, port: (family, address))
        racing = processes.ListeningGroup(*address)
        with pytest.raises(processes.PortTaken, match="another process started listening there"):
            racing.sockets(2)
        assert processes.listeners_on(family, address) == [os.fstat(other.fileno()).st_ino]  # none kept


def test_a_listener_on_a_neighbouring_address_is_not_on_the_port() -> None:
    port = free_port()
    with socket.socket() as neighbour:
        neighbour.bind(("127.0.0.2", port))
        neighbour.listen()
        assert processes.listeners_on(socket.AF_INET, ("127.0.0.1", port)) == []
        inode = os.fstat(neighbour.fileno()).st_ino
        assert processes.listeners_on(socket.AF_INET, ("127.0.0.2", port)) == [inode]
    wildcard = "0.0.0.0"  # noqa: S104 — as /proc writes it, not bound
    assert processes._proc_address(socket.AF_INET, wildcard) == "00000000"


def test_a_host_name_binds_ipv4_as_uvicorn_does() -> None:
    family, address = processes.listening_address("localhost", 0)
    assert (family, address[0]) == (socket.AF_INET, "127.0.0.1")


def test_sockets_of_one_group_share_a_port_and_port_zero_is_chosen_once() -> None:
    family, address = processes.listening_address("127.0.0.1", 0)
    assert address[1] != 0
    with processes.reuse_port_socket(family, address) as a, processes.reuse_port_socket(family, address) as b:
        a.listen()
        b.listen()
        assert a.getsockname() == b.getsockname() == address


async def test_a_connection_accepted_on_a_reuse_port_socket_has_nodelay() -> None:
    family, address = processes.listening_address("127.0.0.1", 0)
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    class Recorder(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    server = await asyncio.get_running_loop().create_server(
        Recorder, sock=processes.reuse_port_socket(family, address))
    try:
        _, writer = await asyncio.open_connection(*address)
        assert await asyncio.wait_for(accepted, 30) == 1  # 0 on a socket made without IPPROTO_TCP
        writer.close()
    finally:
        server.close()


def test_the_launcher_says_why_it_cannot_listen_and_starts_nothing(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "GPUPROV_HOME": str(tmp_path / "home"),
           "GPUPROV_DATABASE_URL": f"sqlite:///{tmp_path}/api.db"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        done = subprocess.run([sys.executable, "-m", "api.serve", "--workers", "2", "--port", str(port)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert not (tmp_path / "api.db").exists()  # no process started (none migrated the database)


def test_a_process_that_cannot_start_stops_the_launcher(tmp_path: Path) -> None:
    # The database's folder does not exist: each process's app fails as it is built (uvicorn's exit 3).
    env = {**os.environ, "GPUPROV_HOME": str(tmp_path / "home"),
           "GPUPROV_DATABASE_URL": f"sqlite:///{tmp_path}/missing/api.db"}
    done = subprocess.run([sys.executable, "-m", "api.serve", "--workers", "2", "--port", str(free_port()),
                           "--log-level", "warning"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "could not start: stopping the others" in done.stderr

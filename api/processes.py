"""Several API processes on one port, each with a listening socket of its own (SO_REUSEPORT), so the
kernel spreads new connections across them.

uvicorn's own `--workers` shares one listening socket between its processes, and asyncio accepts
every connection waiting at once: the process that wakes first takes a whole burst. Clients open
their keep-alive connections in bursts (a browser at a page's first requests, the bench's tabs), so
one process served 7 or 8 of 8 such connections in 9 of 9 tries — and in 6 of 6 with asyncio
taking one connection per wake-up: on two busy cores the other process is not running to take its
turn (bench/RESULTS.md, the thirty-third round) — and a console tab's three lists queued behind
it as if there were one. With a socket each, Linux hashes every new connection to one of them,
whichever process wakes first.

The launcher makes the sockets (`ListeningGroup`) and hands one to each process, uvicorn's Server on
it (`serve_one`): a port another program holds is refused before any process starts, and so is one
that another launcher took at the same moment (checked once the group listens). It starts again a
process that dies after it served, on a new socket of the group (as uvicorn's supervisor restarts
one), stops all when one cannot start (a broken app), and on SIGTERM or SIGINT stops them and
waits."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import traceback
from multiprocessing.process import BaseProcess
from pathlib import Path

from uvicorn.config import STARTUP_FAILURE  # its exit code for a process that failed before serving

log = logging.getLogger("uvicorn.error")

STOP_WAIT_S = 30.0  # how long a stopped process may take to finish its requests before it is killed
BACKLOG = 2048  # uvicorn's default
TCP_LISTEN = "0A"  # the state column of /proc/net/tcp


class PortTaken(RuntimeError):
    pass


def listening_address(host: str, port: int) -> tuple[int, tuple[str, int]]:
    """(family, address) to bind for `host`:`port`, its port chosen by the system when `port` is 0.
    Refused when anything holds the port: bound without SO_REUSEPORT, a probe fails on any socket
    already there, even another launcher's whose processes would otherwise share it silently."""
    # The family as uvicorn picks it (Config.bind_socket): a name such as "localhost" binds IPv4,
    # whatever the resolver lists first.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: past TIME_WAIT
        try:
            probe.bind((host, port))
        except OSError as e:
            raise PortTaken(f"cannot listen on {host}:{port}: {e.strerror}") from e
        return family, probe.getsockname()[:2]


def reuse_port_socket(family: int, address: tuple[str, int]) -> socket.socket:
    """A socket bound to `address` with SO_REUSEPORT: one of a group the kernel balances between
    (Linux: by a hash of each connection's addresses and ports)."""
    # IPPROTO_TCP named, not left 0: asyncio sets TCP_NODELAY on an accepted connection only when
    # its socket says TCP (base_events._set_nodelay). Without it every reply waited on Nagle and
    # the client's delayed ACK: /healthz took 44 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    sock.set_inheritable(True)
    return sock


class ListeningGroup:
    """One launcher's SO_REUSEPORT sockets on `host`:`port` (its port chosen by the system when 0),
    each handed to one process, which holds it alone: the socket listens while its process serves.

    PortTaken when anything else holds the port — before (the probe), or by binding in the same
    moment: two launchers that both probed it free and both bound would share its connections
    silently (Linux groups the same user's SO_REUSEPORT sockets), so once the group's new sockets
    listen, a listener on the port that is not one of the group's refuses them (each of two such
    launchers refuses, or the later one does; never neither)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.family, self.address = listening_address(host, port)
        self._inodes: set[int] = set()  # every socket the group made (its processes hold them)

    def sockets(self, count: int) -> list[socket.socket]:
        made: list[socket.socket] = []
        try:
            for _ in range(count):
                try:
                    sock = reuse_port_socket(self.family, self.address)
                except OSError as e:
                    raise PortTaken(f"cannot listen on {self.host}:{self.address[1]}: {e.strerror}") from e
                made.append(sock)
                sock.listen(BACKLOG)
                self._inodes.add(os.fstat(sock.fileno()).st_ino)
            if any(inode not in self._inodes for inode in listeners_on(self.family, self.address)):
                raise PortTaken(f"cannot listen on {self.host}:{self.address[1]}: another process started "
                                "listening there at the same moment")
        except BaseException:
            for sock in made:
                sock.close()
            raise
        return made


def listeners_on(family: int, address: tuple[str, int]) -> list[int]:
    """The socket inodes listening on `address` or on its port at the wildcard address, from
    /proc/net/tcp (tcp6): every process's, this user's or not. Empty where /proc has no such file."""
    table = Path("/proc/net/tcp6" if family == socket.AF_INET6 else "/proc/net/tcp")
    if not table.exists():
        return []
    wanted = {_proc_address(family, address[0]), _proc_address(family, "::" if family == socket.AF_INET6
                                                                   else "0.0.0.0")}
    found = []
    for line in table.read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        ip, _, hex_port = local.partition(":")
        if state == TCP_LISTEN and int(hex_port, 16) == address[1] and ip in wanted:
            found.append(int(inode))
    return found


def _proc_address(family: int, host: str) -> str:
    """`host` as /proc/net/tcp writes it: the address's 32-bit words each in the host's byte order
    (little-endian: 127.0.0.1 is 0100007F), in hex."""
    packed = socket.inet_pton(family, host)
    words = [packed[i:i + 4] for i in range(0, len(packed), 4)]
    return "".join(int.from_bytes(w, sys.byteorder).to_bytes(4, "big").hex().upper() for w in words)


def serve_one(app: str, sock: socket.socket, log_level: str) -> None:
    """One API process (a spawned child): uvicorn's Server on its socket of the group. uvicorn handles
    its SIGTERM and SIGINT (finishing the requests in flight). One that fails before it serves
    exits STARTUP_FAILURE, whatever failed (uvicorn's own code for it covers only some causes: an
    app whose factory raises left the process with 1, and a launcher restarting it forever)."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(app, factory=True, host=host, port=port, log_level=log_level, backlog=BACKLOG)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except Exception:  # SystemExit passes: uvicorn's own exits keep their codes
        if server.started:
            raise
        traceback.print_exc()  # as an app that fails to start under uvicorn alone says why
        sys.exit(STARTUP_FAILURE)


def run(app: str, host: str, port: int, processes: int, log_level: str) -> int:
    """Serve `app` from `processes` processes on `host`:`port` until SIGTERM or SIGINT: the exit
    code (0 stopped, 1 a process could not start)."""
    import uvicorn

    uvicorn.Config(app, log_level=log_level)  # what it does first: uvicorn's log handlers, in this process
    group = ListeningGroup(host, port)
    first = group.sockets(processes)  # refused (PortTaken) before anything starts or a signal is taken
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter each, as uvicorn's
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}

    def start(sock: socket.socket) -> BaseProcess:
        # The socket goes to the child as a descriptor it inherits (multiprocessing's spawn passes
        # it). Ours is closed: a process that dies takes its socket with it, and the kernel hashes
        # new connections among the live ones rather than to a socket nobody accepts on.
        process = spawn.Process(target=serve_one, args=(app, sock, log_level), name="gpuprov-api")
        try:
            process.start()
        finally:
            sock.close()
        return process

    running = [start(sock) for sock in first]
    log.info("serving on %s:%d from %d processes (each its own socket)", *group.address, processes)
    code = 0
    try:
        while not stop.wait(0.5):
            for i, process in enumerate(running):
                if process.is_alive():
                    continue
                if process.exitcode == STARTUP_FAILURE:
                    log.error("API process %d could not start: stopping the others", process.pid)
                    stop.set()
                    code = 1
                    break
                log.warning("API process %d exited (%s): starting another", process.pid, process.exitcode)
                try:
                    running[i] = start(group.sockets(1)[0])
                except PortTaken as e:
                    log.error("%s: stopping the others", e)
                    stop.set()
                    code = 1
                    break
    finally:
        for process in running:
            if process.is_alive():
                process.terminate()
        for process in running:
            process.join(STOP_WAIT_S)
            if process.is_alive():
                process.kill()
                process.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code

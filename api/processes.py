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

Each process is uvicorn's Server on its own socket (`serve_one`); this launcher starts them, starts
again one that dies after it served (as uvicorn's supervisor does), stops all when one cannot start
(a broken app, a port taken), and on SIGTERM or SIGINT stops them and waits."""

from __future__ import annotations

import logging
import multiprocessing
import signal
import socket
import sys
import threading
import traceback
from multiprocessing.process import BaseProcess

from uvicorn.config import STARTUP_FAILURE  # its exit code for a process that failed before serving

log = logging.getLogger("uvicorn.error")

STOP_WAIT_S = 30.0  # how long a stopped process may take to finish its requests before it is killed


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


def serve_one(app: str, family: int, address: tuple[str, int], log_level: str) -> None:
    """One API process (a spawned child): uvicorn's Server on a socket of its own. uvicorn handles
    its SIGTERM and SIGINT (finishing the requests in flight). One that fails before it serves
    exits STARTUP_FAILURE, whatever failed (uvicorn's own code for it covers only some causes: an
    app whose factory raises left the process with 1, and a launcher restarting it forever)."""
    import uvicorn

    config = uvicorn.Config(app, factory=True, host=address[0], port=address[1], log_level=log_level)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[reuse_port_socket(family, address)])
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
    family, address = listening_address(host, port)
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter each, as uvicorn's
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}

    def start() -> BaseProcess:
        process = spawn.Process(target=serve_one, args=(app, family, address, log_level), name="gpuprov-api")
        process.start()
        return process

    running = [start() for _ in range(processes)]
    log.info("serving on %s:%d from %d processes (each its own socket)", *address, processes)
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
                running[i] = start()
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

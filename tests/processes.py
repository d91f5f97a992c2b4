"""Service processes for tests that run the real thing (the compose stack, the API killed mid-
request): a process handle, a fresh PostgreSQL database, free ports, bounded waits.

Every helper here that starts a service process (and DevRun, WorkerProcess) first asks `require`:
only a test that uses the `processes` fixture (tests/conftest.py) may, so such a test always
carries the `processes` tier marker the suite's tiers are selected by (tests/tiers.py)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import sqlalchemy as sa

from store.db import make_engine
from tests.eventually import eventually

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"


_permits = 0  # how many `permitted()` blocks are open (the `processes` fixture holds one per test)


@contextmanager
def permitted() -> Iterator[None]:
    global _permits
    _permits += 1
    try:
        yield
    finally:
        _permits -= 1


def require(what: str) -> None:
    """Refuse to start `what` outside a test that uses the `processes` fixture."""
    if _permits <= 0:
        raise RuntimeError(f"{what} starts a real process: the test must use the `processes` fixture "
                           "(its tier marker, `processes`, is read off that fixture: tests/tiers.py)")


def simulation_process(*args: Any, **kwargs: Any) -> Any:
    """The simulated clouds as a process of their own (fakeclouds.server.start_subprocess)."""
    require("the simulated clouds' process")
    from fakeclouds.server import start_subprocess

    return start_subprocess(*args, **kwargs)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_handed_out: set[int] = set()  # every port free_port() has returned in this process


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range, never one this process was given
    before. A port the kernel picked for bind(0) lies in that range, and once its first listener
    stops (a restart test), any outgoing connection on the machine may take it as its source port:
    the restarted server then fails with "address already in use" (seen as a Temporal dev server
    restart failing under a busy full suite). Ports below the range are never handed out that way.
    A port is still free after it is returned, so a second call could draw it again before anything
    listens: five draws for one `gpuprov dev` once gave its TLS listener Temporal's port."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(10000, low) if low > 11000 else 0
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        _handed_out.add(port)
        return port
    raise RuntimeError("no free loopback port below the ephemeral range")


async def until(check: Callable[[], Awaitable[Any]], within_s: float, what: str) -> Any:
    """The first truthy value of `check()`, polled: `eventually` with positional arguments."""
    return await eventually(check, within=within_s, what=what)


@contextmanager
def fresh_postgres_database(prefix: str) -> Iterator[str]:
    """A new, empty PostgreSQL database (GPUPROV_TEST_POSTGRES_URL's server), dropped afterwards."""
    base = os.environ.get("GPUPROV_TEST_POSTGRES_URL", DEFAULT_PG)
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = make_engine(base).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield urlunsplit(urlsplit(base)._replace(path=f"/{name}"))
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


class Process:
    """One service process, its output in `log`: kill (SIGKILL), restart, pause/resume, stop."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        require(f"Process {name!r}")
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as out:
            return subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def restart(self) -> None:
        self.kill()
        self.proc = self._spawn()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.resume()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:]) if self.log.exists() else ""

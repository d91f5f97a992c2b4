"""A real SSH server per simulated machine (asyncssh, on a loopback address the engine picks).

It accepts only the machine's login user with one of the public keys given at launch.
Exec requests run `bash -c CMD` in the machine's home directory; a session that asks
for a PTY gets bash on a real pseudo-terminal, so OpenSSH's `ssh -p PORT user@HOST`
gives a usable shell. SFTP is chrooted to the home directory. Commands run as the OS
user of the server process: this is a simulation, not isolation.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import struct
import termios
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import asyncssh

from fakeclouds import guest_power, host_guard
from fakeclouds.who import SESSIONS_DIR

log = logging.getLogger(__name__)


def load_or_create_host_key(path: Path) -> asyncssh.SSHKey:
    if path.exists():
        return asyncssh.read_private_key(str(path))
    key = asyncssh.generate_private_key("ssh-ed25519")
    path.parent.mkdir(parents=True, exist_ok=True)
    key.write_private_key(str(path))
    os.chmod(path, 0o600)
    return key


def parse_public_key(text: str) -> asyncssh.SSHKey:
    """Parse one OpenSSH public key line; ValueError with a clear message when it is not one."""
    try:
        return asyncssh.import_public_key(text.strip())
    except (asyncssh.KeyImportError, ValueError, TypeError) as exc:
        raise ValueError(f"not an OpenSSH public key: {exc}") from exc


def _set_winsize(fd: int, cols: int, rows: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows or 24, cols or 80, 0, 0))


def authorized_keys_file(home: Path) -> set[bytes]:
    """The keys in home/.ssh/authorized_keys, read at each login as sshd does (what a cloud-init
    part, a startup script or gpuprov itself wrote there after launch); bad lines are skipped."""
    try:
        text = (home / ".ssh" / "authorized_keys").read_text(errors="replace")
    except OSError:
        return set()
    found = set()
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            if line.strip() and not line.lstrip().startswith("#"):
                found.add(parse_public_key(line).public_data)
    return found


# A service on the machine itself: port -> where it is really served (None: nothing listens there).
Inside = Callable[[], Awaitable[tuple[str, int] | None]]
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


class _Auth(asyncssh.SSHServer):
    def __init__(self, user: str, keys: set[bytes], home: Path, inside: Mapping[int, Inside],
                 on_login: Callable[[], None], open_connections: set[asyncssh.SSHServerConnection]) -> None:
        self._user = user
        self._keys = keys
        self._home = home
        self._inside = inside
        self._on_login = on_login
        self._open = open_connections  # the server's: stop() drops them
        self._conn: asyncssh.SSHServerConnection | None = None

    def auth_completed(self) -> None:
        self._on_login()  # one login: what the watch's "one session per machine per round" counts

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._open.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._open.discard(self._conn)

    def begin_auth(self, username: str) -> bool:
        return True  # always require authentication

    def password_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return username == self._user and (key.public_data in self._keys
                                           or key.public_data in authorized_keys_file(self._home))

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str,
                             orig_port: int) -> Any:
        """Allow `ssh -L` (hosts are required to allow TCP forwarding). A port of the machine's own
        (its simulated k3s's 6443) is served by the simulation, not by whatever the host has there."""
        service = self._inside.get(dest_port) if dest_host in LOOPBACK_NAMES else None
        if service is None:
            return True
        return self._forward_inside(service)

    async def _forward_inside(self, service: Inside) -> Any:  # an SSHForwarder: asyncssh pipes it
        where = await service()
        if where is None or self._conn is None:
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "Connection refused")
        return await self._conn.forward_connection(*where)


class MachineSSH:
    """One machine's SSH server. start() binds host:port (port 0 = ephemeral); stop() closes it."""

    def __init__(self, *, home: Path, host_key: asyncssh.SSHKey, user: str, public_keys: list[str],
                 env: dict[str, str] | None = None, inside: Mapping[int, Inside] | None = None,
                 on_login: Callable[[], None] = lambda: None) -> None:
        self.home = home
        self.on_login = on_login  # each accepted login (fakeclouds/calls.py counts them per machine)
        self.inside = dict(inside or {})
        self.host_key = host_key
        self.user = user
        self.keys = {parse_public_key(k).public_data for k in public_keys}
        self.extra_env = env or {}
        self._server: asyncssh.SSHAcceptor | None = None
        self._children: set[asyncio.subprocess.Process] = set()
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self.host: str | None = None
        self.port: int | None = None

    async def start(self, host: str, port: int = 0) -> int:
        """Listen on host:port; returns the port. OSError (e.g. EADDRINUSE, EACCES) when it cannot."""
        self._server = await asyncssh.create_server(
            lambda: _Auth(self.user, self.keys, self.home, self.inside, self.on_login, self._connections),
            host, port,
            server_host_keys=[self.host_key], process_factory=self._handle, encoding=None,
            sftp_factory=self._sftp, allow_scp=True, line_editor=False,  # bash's own PTY handles echo
            keepalive_interval=0, login_timeout=30,
        )
        self.host = host
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def _sftp(self, chan: asyncssh.SSHServerChannel) -> asyncssh.SFTPServer:
        return asyncssh.SFTPServer(chan, chroot=os.fsencode(self.home))

    async def stop(self) -> None:
        """The machine's SSH goes: no new login, and the connections open now are dropped — a
        machine that is gone answers nothing more on a connection made before (asyncssh's close()
        alone only stops listening: a reused client connection went on reading a preempted
        machine's files)."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None
        for conn in list(self._connections):
            conn.abort()
        self._connections.clear()
        for child in list(self._children):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)

    def _env(self, term: str | None = None) -> dict[str, str]:
        bin_dir = self.home / "bin"
        env = {
            "HOME": str(self.home), "USER": self.user, "LOGNAME": self.user, "SHELL": "/bin/bash",
            # The machine's own tools first, then its simulated power commands (shutdown, poweroff,
            # systemctl poweroff, sudo for those: guest_power.py), then the guard against commands
            # that would change the host.
            "PATH": f"{bin_dir}:{guest_power.shim_dir()}:{host_guard.guard_dir()}:"
                    f"{os.environ.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
            "LANG": os.environ.get("LANG", "C.UTF-8"),
        }
        if term:
            env["TERM"] = term
        env.update(self.extra_env)
        return env

    async def _handle(self, process: asyncssh.SSHServerProcess) -> None:
        try:
            if process.get_terminal_type():
                rc = await self._run_pty(process)
            else:
                rc = await self._run_pipes(process)
        except Exception:  # a broken session must not take the server down
            log.exception("ssh session failed")
            rc = 255
        with contextlib.suppress(Exception):
            process.exit(rc)

    def _argv(self, command: str | None) -> list[str]:
        return ["bash", "-c", command] if command else ["bash", "-l"]

    async def _run_pipes(self, process: asyncssh.SSHServerProcess) -> int:
        proc = await asyncio.create_subprocess_exec(
            *self._argv(process.command), cwd=self.home, env=self._env(),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self._children.add(proc)
        assert proc.stdin and proc.stdout and proc.stderr
        child_in = proc.stdin

        async def pump_in() -> None:
            with contextlib.suppress(Exception):
                while data := await process.stdin.read(65536):
                    child_in.write(data)
                    await child_in.drain()
            with contextlib.suppress(Exception):
                child_in.close()

        async def pump_out(src: asyncio.StreamReader, dst: asyncssh.SSHWriter) -> None:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()

        feeder = asyncio.create_task(pump_in())
        try:
            await asyncio.gather(pump_out(proc.stdout, process.stdout), pump_out(proc.stderr, process.stderr))
            return await proc.wait()
        finally:
            feeder.cancel()
            self._children.discard(proc)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)

    def _open_session(self, pid: int, tty: str) -> Path:
        """Record an open PTY session where the machine's SIMULATED `who` reads it (sshd writes a
        utmp record for a terminal login; this machine has no utmp). Removed when it ends."""
        d = self.home / SESSIONS_DIR
        d.mkdir(exist_ok=True)
        f = d / str(pid)
        f.write_text(f"{self.user} {tty} {time.strftime('%Y-%m-%d %H:%M')} (simulated)\n")
        return f

    async def _run_pty(self, process: asyncssh.SSHServerProcess) -> int:
        master, slave = os.openpty()
        tty = os.ttyname(slave).removeprefix("/dev/")
        cols, rows, *_ = process.get_terminal_size()
        _set_winsize(master, cols, rows)

        def make_controlling_tty() -> None:  # runs in the child, after setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        try:
            proc = await asyncio.create_subprocess_exec(
                *(["bash", "-c", process.command] if process.command else ["bash", "-i", "-l"]),
                cwd=self.home, env=self._env(process.get_terminal_type()),
                stdin=slave, stdout=slave, stderr=slave,
                start_new_session=True, preexec_fn=make_controlling_tty,
            )
        finally:
            os.close(slave)
        self._children.add(proc)
        session_file = self._open_session(proc.pid, tty)
        loop = asyncio.get_running_loop()
        out: asyncio.Queue[bytes] = asyncio.Queue()

        def readable() -> None:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child side closed
                data = b""
            if not data:
                loop.remove_reader(master)
            out.put_nowait(data)

        os.set_blocking(master, False)
        loop.add_reader(master, readable)

        async def pump_in() -> None:
            while True:
                try:
                    data = await process.stdin.read(65536)
                except asyncssh.TerminalSizeChanged as change:
                    _set_winsize(master, change.width, change.height)
                    continue
                except (asyncssh.BreakReceived, asyncssh.SignalReceived):
                    continue
                except Exception:  # the channel went away
                    data = b""
                if not data:
                    break
                with contextlib.suppress(BlockingIOError, OSError):
                    os.write(master, data)
            # Input is over; once the channel closes (client gone), hang up like sshd does.
            with contextlib.suppress(Exception):
                await process.channel.wait_closed()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGHUP)

        feeder = asyncio.create_task(pump_in())
        try:
            while data := await out.get():
                process.stdout.write(data)
                await process.stdout.drain()
            return await proc.wait()
        finally:
            feeder.cancel()
            loop.remove_reader(master)
            os.close(master)
            with contextlib.suppress(OSError):
                session_file.unlink()
            self._children.discard(proc)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)

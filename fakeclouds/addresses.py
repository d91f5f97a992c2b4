"""Loopback addresses for clouds whose SSH port is fixed (Lambda: always 22).

Such a provider's API reports only an IP, so every simulated machine needs its own address:
all of 127.0.0.0/8 is local on Linux, so machine N listens on its own 127.A.B.C:22. Each engine
draws a random /20 — 4,094 machines alive at once, room for the bench's thousand — never in
127.0.x.x (home of 127.0.0.1) nor 127.255.x.x (the broadcast's), so two engines on one host
(tests, `make run`) rarely meet; when they do, the bind fails with EADDRINUSE and the engine asks
for the next address.
"""

from __future__ import annotations

import errno
import ipaddress
import random
from collections.abc import Container

SHARED_HOST = "127.0.0.1"  # clouds whose API reports a port: every machine here, on its own port


def _random_block() -> ipaddress.IPv4Network:
    rng = random.SystemRandom()
    return ipaddress.IPv4Network(f"127.{rng.randint(1, 254)}.{rng.randint(0, 15) * 16}.0/20")


class LoopbackPool:
    """Hands out the addresses of one block (a /20 by default) in turn, skipping those still held."""

    def __init__(self, network: str | None = None) -> None:
        self.network = ipaddress.IPv4Network(network) if network else _random_block()
        if not self.network.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")):
            raise ValueError(f"{self.network} is not a loopback network")
        self._hosts = [str(h) for h in self.network.hosts() if str(h) != SHARED_HOST]
        self._next = 0

    def take(self, held: Container[str]) -> str | None:
        """The next address not in `held` (round robin, so a freed address is not reused at once);
        None when every one is held."""
        for _ in range(len(self._hosts)):
            address = self._hosts[self._next]
            self._next = (self._next + 1) % len(self._hosts)
            if address not in held:
                return address
        return None


def bind_failure(exc: OSError, host: str, port: int) -> str:
    """A machine's `detail` when its SSH server cannot listen on host:port: say why, and the fix."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (f"SSH server cannot listen on {host}:{port}: needs root to listen on port {port} "
                "(or CAP_NET_BIND_SERVICE, or sysctl net.ipv4.ip_unprivileged_port_start=0)")
    if exc.errno == errno.EADDRNOTAVAIL:
        return (f"SSH server cannot listen on {host}:{port}: {host} is not a local address here "
                "(Linux routes all of 127.0.0.0/8 to loopback; macOS needs `ifconfig lo0 alias`)")
    if exc.errno == errno.EADDRINUSE:
        return (f"SSH server cannot listen on {host}:{port}: address in use "
                f"(is something, e.g. the host's sshd, listening on 0.0.0.0:{port}?)")
    return f"SSH server failed to start on {host}:{port}: {exc}"

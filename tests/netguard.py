"""A test process talks only to loopback and unix sockets.

A name lookup of anything but `localhost` or a loopback address, or a connection to anything but a
loopback address, fails at once with what was asked — instead of reaching a real cloud (an adapter
left on its public default endpoint), a resolver, or a private network, or silently waiting out a
timeout there. Installed by tests/conftest.py for the pytest process and its xdist workers; the
service processes the `processes` tests start are not covered (their clouds are the simulation's
endpoints, and GPUPROV_ALLOWED_ENDPOINTS refuses others). A test that makes network namespaces of
its own (tests/fleets/test_probe.py) lets their addresses through with `allowed(network)`."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

_allowed: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []


@contextlib.contextmanager
def allowed(network: str) -> Iterator[None]:
    """While the block runs, `network` (e.g. "10.201.7.0/29", a test's own namespaces) may be dialled."""
    net = ipaddress.ip_network(network)
    _allowed.append(net)
    try:
        yield
    finally:
        _allowed.remove(net)


class OffLoopback(OSError):
    """What a test process asked for outside loopback."""


def _is_local(host: object) -> bool:
    if host is None or host in ("localhost", ""):  # None / "": a wildcard bind, not a peer
        return True
    text = host.decode() if isinstance(host, bytes) else str(host)
    try:
        address = ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return text == "localhost"
    return address.is_loopback or address.is_unspecified or any(address in net for net in _allowed)


def install() -> None:
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_local(host):
            raise OffLoopback(f"tests resolve only loopback names: {host!r} was looked up")
        return real_getaddrinfo(host, *args, **kwargs)

    def refuse_off_loopback(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            raise OffLoopback(f"tests connect only to loopback: {address!r} was dialled")

    def connect(self: socket.socket, address: Any) -> None:
        refuse_off_loopback(self, address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        refuse_off_loopback(self, address)
        return real_connect_ex(self, address)

    socket.getaddrinfo = getaddrinfo
    socket.socket.connect = connect  # type: ignore[method-assign, assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign, assignment]

"""tests/netguard.py, installed in every test process by tests/conftest.py."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from tests.netguard import OffLoopback


def test_a_lookup_of_an_outside_name_fails_at_once() -> None:
    with pytest.raises(OffLoopback, match="api.modal.com"):
        socket.getaddrinfo("api.modal.com", 443)
    assert socket.getaddrinfo("localhost", 80)  # loopback names still resolve


def test_a_connection_outside_loopback_fails_before_any_packet() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s, pytest.raises(OffLoopback, match="10.1.2.3"):
        s.connect(("10.1.2.3", 22))  # never sent: refused before the real connect
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        assert s.connect_ex(("127.0.0.1", 1)) != 0  # loopback is dialled (nothing listens on port 1)


async def test_clients_see_it_as_a_connect_error() -> None:
    async with httpx.AsyncClient(timeout=5) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get("https://api.nebius.cloud/")
    with pytest.raises(OffLoopback):
        await asyncio.open_connection("192.0.2.1", 443)

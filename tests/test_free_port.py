"""tests/processes.py's free_port: a process is never handed the same port twice. Five draws for
one `gpuprov dev` once gave its TLS listener the port its Temporal server already had."""

from __future__ import annotations

import socket

from tests.processes import _ephemeral_low, free_port


def test_never_the_same_port_twice_in_a_process() -> None:
    # 2,000 draws from ~22,000 ports: with independent draws, repeats are all but certain (~90).
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)


def test_a_port_below_the_ephemeral_range_that_is_free() -> None:
    port = free_port()
    assert 10000 <= port < _ephemeral_low()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # nothing listens there

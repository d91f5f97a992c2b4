"""A DNS listener that answers nothing, as a process of its own so a test can run it inside a network
namespace (`ip netns exec NS python -m tests.netns_dns`) whose resolv.conf names 127.0.0.1: it prints
`ready` once bound to 127.0.0.1:53, then the name of every query it receives, one per line."""

from __future__ import annotations

import socket


def query_name(packet: bytes) -> str:
    """The first question's name of a DNS message (RFC 1035 4.1: a 12-byte header, then labels, each
    a length byte and that many bytes, ended by a zero byte)."""
    labels: list[str] = []
    at = 12
    while at < len(packet) and (size := packet[at]):
        labels.append(packet[at + 1:at + 1 + size].decode("ascii", "replace"))
        at += 1 + size
    return ".".join(labels)


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 53))
    print("ready", flush=True)
    while True:
        packet, _ = sock.recvfrom(4096)
        print(query_name(packet), flush=True)


if __name__ == "__main__":
    main()

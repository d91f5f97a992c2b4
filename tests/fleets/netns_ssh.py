"""One SSH server (fakeclouds/ssh.py MachineSSH) as a process of its own, so a test can run it
inside a network namespace: `ip netns exec NS python -m tests.fleets.netns_ssh ...`.

It prints `ready` once listening and stops (its sessions killed) on SIGTERM. As a bastion it
forwards direct-tcpip channels from its own namespace, as `AllowTcpForwarding yes` does.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

import asyncssh

from fakeclouds.ssh import MachineSSH


async def serve(args: argparse.Namespace) -> None:
    home = Path(args.home)
    server = MachineSSH(home=home, host_key=asyncssh.read_private_key(args.host_key), user=args.user,
                        public_keys=[args.public_key], env={"PATH": f"{home / 'bin'}:/usr/bin:/bin"})
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await server.start(args.listen, args.port)
    print("ready", flush=True)
    await stop.wait()
    await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--listen", "--home", "--user", "--public-key", "--host-key"):
        parser.add_argument(name, required=True)
    parser.add_argument("--port", type=int, default=22)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()

"""Clouds whose SSH port is fixed (Lambda: 22) give each machine its own loopback address."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import itertools
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from fakeclouds import clouds
from fakeclouds.addresses import LoopbackPool
from fakeclouds.engine import Engine, Machine
from fakeclouds.ssh import MachineSSH
from tests.fakeclouds.helpers import wait_engine

FACADES = clouds.all_facades()  # every simulated cloud


def _gpu(engine: Engine, pubkey: str, **kw: object) -> list[Machine]:
    return engine.create("lambda", instance_type="gpu_1x_a10", region="us-east-1", public_keys=[pubkey],
                         **kw)  # type: ignore[arg-type]


async def _ssh(host: str, key: asyncssh.SSHKey, command: str) -> tuple[str, bytes]:
    """Log in like a Lambda client (the instance's address, port 22); (stdout, server host key)."""
    async with asyncssh.connect(host, 22, username="ubuntu", client_keys=[key], known_hosts=None,
                                agent_path=None, connect_timeout=30) as conn:
        out = (await conn.run(command)).stdout
        host_key = conn.get_server_host_key()
        assert host_key is not None
        return str(out), host_key.public_data


@contextlib.contextmanager
def _occupied(host: str, port: int = 22) -> Iterator[None]:
    """Another process's listener on host:port (what a second engine on this host would hold)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen()
        yield


def test_pool_draws_loopback_addresses_in_turn() -> None:
    net = LoopbackPool().network
    assert net.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")) and net.prefixlen == 20
    assert net.num_addresses - 2 >= 1000  # a thousand machines at once (bench's scale figure)
    assert not net.subnet_of(ipaddress.IPv4Network("127.0.0.0/16"))  # 127.0.0.1 lives there
    assert not net.subnet_of(ipaddress.IPv4Network("127.255.0.0/16"))
    pool = LoopbackPool("127.0.0.0/29")  # a test's own block may include 127.0.0.1: still never handed out
    assert [pool.take(set()) for _ in range(6)] == [f"127.0.0.{i}" for i in (2, 3, 4, 5, 6, 2)]
    assert pool.take({"127.0.0.3", "127.0.0.4"}) == "127.0.0.5"
    assert pool.take({f"127.0.0.{i}" for i in range(8)}) is None


async def test_machines_get_distinct_addresses_on_port_22(tmp_path: Path, pubkey: str,
                                                          ssh_key: asyncssh.SSHKey) -> None:
    engine = Engine(facades=FACADES, boot_delay=0.01, terminate_delay=0.01, state_dir=tmp_path / "state")
    await engine.start()
    try:
        a, b = _gpu(engine, pubkey, quantity=2)
        (cpu,) = engine.create("local", name="cpu", instance_type="cpu-small", region="local-1",
                               public_keys=[pubkey])
        for m in (a, b, cpu):
            await wait_engine(engine, m.id, "running")
        assert a.address != b.address and a.ssh_port == b.ssh_port == 22
        assert {a.address, b.address} <= {str(h) for h in engine.loopback.network.hosts()}
        assert cpu.address == "127.0.0.1" and cpu.ssh_port != 22  # our own API reports a port
        homes = []
        for m in (a, b):
            assert m.address is not None
            out, _ = await _ssh(m.address, ssh_key, "echo $HOME")
            homes.append(out.strip())
        assert homes == [str(engine.machine_home(a)), str(engine.machine_home(b))]
    finally:
        await engine.stop()


async def test_restart_brings_machine_back_on_its_address(tmp_path: Path, pubkey: str,
                                                          ssh_key: asyncssh.SSHKey) -> None:
    state = tmp_path / "state"
    first = Engine(facades=FACADES, boot_delay=0.01, terminate_delay=0.01, state_dir=state)
    await first.start()
    (m,) = _gpu(first, pubkey)
    await wait_engine(first, m.id, "running")
    address = m.address
    assert address is not None
    _, host_key = await _ssh(address, ssh_key, "echo kept > note")
    await first.stop()
    with pytest.raises(OSError):  # nothing listens while the engine is down
        await _ssh(address, ssh_key, "true")

    # draws another block
    second = Engine(facades=FACADES, boot_delay=0.01, terminate_delay=0.01, state_dir=state)
    await second.start()
    try:
        back = second.machines[m.id]
        assert (back.status, back.address, back.ssh_port) == ("running", address, 22)
        assert await _ssh(address, ssh_key, "cat note") == ("kept\n", host_key)
    finally:
        await second.stop()


async def test_restore_onto_a_taken_address_is_an_error(tmp_path: Path, pubkey: str) -> None:
    state = tmp_path / "state"
    first = Engine(facades=FACADES, boot_delay=0.01, terminate_delay=0.01, state_dir=state)
    await first.start()
    (m,) = _gpu(first, pubkey)
    await wait_engine(first, m.id, "running")
    await first.stop()
    assert m.address is not None
    second = Engine(facades=FACADES, boot_delay=0.01, terminate_delay=0.01, state_dir=state)
    with _occupied(m.address):
        await second.start()
        try:
            back = second.machines[m.id]
            assert back.status == "error" and back.detail is not None and "address in use" in back.detail
        finally:
            await second.stop()


async def test_an_address_held_elsewhere_is_skipped(pubkey: str, ssh_key: asyncssh.SSHKey) -> None:
    net = LoopbackPool().network
    first, second = (str(h) for h in itertools.islice(net.hosts(), 2))
    engine = Engine(facades=FACADES, boot_delay=0.01, terminate_delay=0.01, loopback=LoopbackPool(str(net)))
    await engine.start()
    try:
        with _occupied(first):
            (m,) = _gpu(engine, pubkey)
            await wait_engine(engine, m.id, "running")
        assert m.address == second
        assert (await _ssh(second, ssh_key, "echo hi"))[0] == "hi\n"
    finally:
        await engine.stop()


async def test_port_22_without_root_is_an_error_that_says_so(monkeypatch: pytest.MonkeyPatch,
                                                              pubkey: str) -> None:
    real_start = MachineSSH.start

    async def unprivileged(self: MachineSSH, host: str, port: int = 0) -> int:
        if 0 < port < 1024:  # what the kernel answers a non-root process
            raise OSError(errno.EACCES, "Permission denied")
        return await real_start(self, host, port)

    monkeypatch.setattr(MachineSSH, "start", unprivileged)
    engine = Engine(facades=FACADES, boot_delay=0.01, terminate_delay=0.01)
    await engine.start()
    try:
        (gpu,) = _gpu(engine, pubkey)
        (cpu,) = engine.create("local", name="cpu", instance_type="cpu-small", region="local-1",
                               public_keys=[pubkey])
        await wait_engine(engine, gpu.id, "error")
        assert gpu.detail is not None and "needs root to listen on port 22" in gpu.detail
        assert gpu.address is None and gpu.host is None
        await wait_engine(engine, cpu.id, "running")  # a random port needs no privilege
    finally:
        await engine.stop()


async def test_state_from_before_addresses_is_brought_forward(tmp_path: Path, pubkey: str,
                                                              ssh_key: asyncssh.SSHKey) -> None:
    """A state dir written before machines had addresses (Lambda shared 127.0.0.1 on a random port)
    and before stock was per facade: the machine comes back on its own address, port 22."""
    state = tmp_path / "state"
    first = Engine(facades=FACADES, boot_delay=0.01, terminate_delay=0.01, state_dir=state)
    await first.start()
    (m,) = _gpu(first, pubkey)
    await wait_engine(first, m.id, "running")
    await first.stop()
    old = json.loads((state / "state.json").read_text())
    for raw in old["machines"]:
        del raw["address"]
        raw["ssh_port"] = 40022
    old["stock"] = [[t, r, n] for _, t, r, n in old["stock"]]
    (state / "state.json").write_text(json.dumps(old))

    second = Engine(facades=FACADES, boot_delay=0.01, terminate_delay=0.01, state_dir=state)
    await second.start()
    try:
        back = second.machines[m.id]
        assert back.status == "running" and back.ssh_port == 22 and back.address is not None
        assert (await _ssh(back.address, ssh_key, "echo back"))[0] == "back\n"
        assert second.in_stock("lambda", "gpu_1x_a10", "us-east-1") == 3
    finally:
        await second.stop()

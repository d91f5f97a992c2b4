from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import asyncssh
import pytest

from api.serve import process_alive
from fakeclouds import clouds, vastai_api
from fakeclouds.engine import Engine
from fakeclouds.errors import Invalid, NameConflict, NoCapacity, NotFound, QuotaExceeded
from tests.fakeclouds.helpers import wait_engine

FACADES = clouds.all_facades()  # every simulated cloud
VAST_TYPE, VAST_REGION = vastai_api.INSTANCE_TYPES[0].name, next(iter(vastai_api.INSTANCE_TYPES[0].prices))


@pytest.fixture
async def engine(tmp_path: Path):
    eng = Engine(facades=FACADES, boot_delay=0.05, terminate_delay=0.01, state_dir=tmp_path / "state")
    await eng.start()
    yield eng
    await eng.stop()


def _local(engine: Engine, pubkey: str, **kw):
    args = {"name": "m", "instance_type": "cpu-small", "region": "local-1", "public_keys": [pubkey], **kw}
    return engine.create("local", **args)


async def test_refuses_what_the_cloud_refuses(engine: Engine, pubkey: str) -> None:
    with pytest.raises(Invalid, match="unknown instance type"):
        _local(engine, pubkey, instance_type="gpu_1x_a10")
    with pytest.raises(Invalid, match="unknown region"):
        _local(engine, pubkey, region="us-east-1")
    with pytest.raises(Invalid, match="not an OpenSSH public key"):
        _local(engine, pubkey, public_keys=["ssh-rsa garbage"])
    with pytest.raises(Invalid, match="name"):
        _local(engine, pubkey, name="-starts-with-dash")
    with pytest.raises(Invalid, match="spot"):
        engine.create("lambda", instance_type="gpu_1x_a10", region="us-east-1", public_keys=[pubkey],
                      spot=True)
    with pytest.raises(Invalid, match="not offered"):
        engine.set_stock("gpu_1x_a10", "local-1", 3)
    _local(engine, pubkey, name="taken")
    with pytest.raises(NameConflict):
        _local(engine, pubkey, name="taken")
    with pytest.raises(NotFound):
        engine.get("lambda", next(iter(engine.machines)))  # other facade's machine is invisible
    engine.configure(quota={"local": 1})
    with pytest.raises(QuotaExceeded):
        _local(engine, pubkey, name="second")
    assert len(engine.machines) == 1


async def test_stock_and_billing(engine: Engine, pubkey: str) -> None:
    engine.set_stock("cpu-small", "local-1", 2)
    (a,), (b,) = _local(engine, pubkey, name="a"), _local(engine, pubkey, name="b")
    assert engine.in_stock("local", "cpu-small", "local-1") == 0
    with pytest.raises(NoCapacity) as err:
        _local(engine, pubkey, name="c")
    assert err.value.region == "local-1"
    await wait_engine(engine, a.id, "running")
    engine.terminate("local", a.id)
    await wait_engine(engine, a.id, "terminated")
    assert engine.in_stock("local", "cpu-small", "local-1") == 1
    billed = a.billing_seconds()
    await asyncio.sleep(0.05)
    assert a.billing_seconds() == billed > 0  # stopped when gone
    assert b.billing_seconds() > billed  # still running, still billing
    await engine.kill(b.id)
    assert b.status == "error" and b.billing_seconds() > 0 and b.ended_at is None  # dead still bills


async def test_lambda_quantity_and_unique_ids(engine: Engine, pubkey: str) -> None:
    made = engine.create("lambda", name="x", instance_type="gpu_1x_a10", region="us-east-1",
                         public_keys=[pubkey], quantity=3)
    assert len({m.id for m in made}) == 3 and all(len(m.id) == 32 for m in made)
    assert engine.in_stock("lambda", "gpu_1x_a10", "us-east-1") == 1
    with pytest.raises(NoCapacity):
        engine.create("lambda", name="x", instance_type="gpu_1x_a10", region="us-east-1",
                      public_keys=[pubkey], quantity=2)
    smi = engine.machine_home(made[0]) / "bin" / "nvidia-smi"
    assert "SIMULATED" in smi.read_text()


async def test_persistence_restores_machines_same_port_and_host_key(tmp_path: Path, pubkey: str,
                                                                    ssh_key: asyncssh.SSHKey) -> None:
    state = tmp_path / "state"
    first = Engine(facades=FACADES, boot_delay=0.05, terminate_delay=0.01, state_dir=state)
    await first.start()
    (up,) = _local(first, pubkey, name="up")
    (stuck,) = _local(first, pubkey, name="stuck", stuck=True)
    (gone,) = _local(first, pubkey, name="gone")
    (gpu,) = first.create("lambda", name=None, instance_type="gpu_1x_a10", region="us-west-1",
                           public_keys=[pubkey])
    await wait_engine(first, up.id, "running")
    first.terminate("local", gone.id)
    await wait_engine(first, gone.id, "terminated")
    first.configure(boot_delay=3600)  # the next one is still booting when the engine stops, and after
    (booting,) = _local(first, pubkey, name="booting")
    port = up.ssh_port
    async with asyncssh.connect("127.0.0.1", port, username="gpuprov", client_keys=[ssh_key],
                                known_hosts=None) as conn:
        host_key = conn.get_server_host_key().public_data
        await conn.run("echo kept > note")
    await first.stop()

    second = Engine(facades=FACADES, boot_delay=0.05, terminate_delay=0.01, state_dir=state)
    await second.start()
    try:
        assert second.machines[up.id].status == "running" and second.machines[up.id].ssh_port == port
        assert second.machines[stuck.id].status == "pending"
        assert second.machines[gone.id].status == "terminated"
        assert second.machines[booting.id].status == "pending"
        assert second.in_stock("local", "cpu-small", "local-1") == 8 - 3
        async with asyncssh.connect("127.0.0.1", port, username="gpuprov", client_keys=[ssh_key],
                                    known_hosts=None) as conn:
            assert conn.get_server_host_key().public_data == host_key
            assert (await conn.run("cat note")).stdout == "kept\n"
        await wait_engine(second, gpu.id, "running")
        assert second.machines[booting.id].boot_at > time.time() + 20  # resumes its own schedule
    finally:
        await second.stop()


async def test_terminating_a_machine_stops_what_it_ran_even_detached(engine: Engine, pubkey: str,
                                                                     ssh_key: asyncssh.SSHKey) -> None:
    """A VM's end ends its processes: a command started with setsid/nohup (as gpuprov's jobs run)
    outlives its SSH session, not the machine."""
    (m,) = _local(engine, pubkey, name="runner")
    await wait_engine(engine, m.id, "running")
    async with asyncssh.connect("127.0.0.1", m.ssh_port, username="gpuprov", client_keys=[ssh_key],
                                known_hosts=None) as conn:
        await conn.run("setsid nohup sleep 300 > /dev/null 2>&1 < /dev/null & echo $! > pid", check=True)
        pid = int((await conn.run("cat pid", check=True)).stdout or "0")
    assert process_alive(pid)  # still running with the session closed
    engine.terminate("local", m.id)
    await wait_engine(engine, m.id, "terminated")
    deadline = time.monotonic() + 30
    while process_alive(pid):
        assert time.monotonic() < deadline, "the machine's detached process survived its termination"
        await asyncio.sleep(0.05)


async def test_a_cloud_stopped_for_good_ends_what_its_machines_ran_and_leaves_nothing(
        pubkey: str, ssh_key: asyncssh.SSHKey) -> None:
    """A cloud without a state directory is gone when it stops: its machines' processes, detached or
    not, and every file it made (one scan of the host's processes for all of them: fakeclouds/own_temp.py)."""
    eng = Engine(facades=FACADES, boot_delay=0.05, terminate_delay=0.01)
    await eng.start()
    pids = []
    try:
        assert eng.root.name.startswith(f"fakeclouds-engine-{os.getpid()}-")  # the next process's to sweep
        for name in ("one", "two"):
            (m,) = _local(eng, pubkey, name=name)
            await wait_engine(eng, m.id, "running")
            async with asyncssh.connect("127.0.0.1", m.ssh_port, username="gpuprov", client_keys=[ssh_key],
                                        known_hosts=None) as conn:
                await conn.run("setsid nohup sleep 300 > /dev/null 2>&1 < /dev/null & echo $! > pid",
                               check=True)
                pids.append(int((await conn.run("cat pid", check=True)).stdout or "0"))
        assert all(process_alive(pid) for pid in pids)
    finally:
        await eng.stop()
    assert not eng.root.exists()
    deadline = time.monotonic() + 30
    while any(process_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, "a machine's detached process outlived its cloud"
        await asyncio.sleep(0.05)


async def test_a_key_attached_while_the_ssh_server_starts_is_admitted(
        engine: Engine, pubkey: str, ssh_key: asyncssh.SSHKey, monkeypatch: pytest.MonkeyPatch) -> None:
    """Vast.ai attaches keys to an instance that may be booting: a key attached in the moment its SSH
    server is starting (after the server read the machine's keys, before the engine knows the server)
    must log in all the same."""
    from fakeclouds import ssh as fake_ssh

    nobody = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    start = fake_ssh.MachineSSH.start
    attached: list[str] = []

    async def start_then_attach(self: fake_ssh.MachineSSH, host: str, port: int = 0) -> int:
        if not attached:  # the attach lands while the server is starting
            attached.append(engine.authorize_key("vastai", m.id, pubkey).id)
        return await start(self, host, port)

    monkeypatch.setattr(fake_ssh.MachineSSH, "start", start_then_attach)
    [m] = engine.create("vastai", instance_type=VAST_TYPE, region=VAST_REGION, public_keys=[nobody])
    await wait_engine(engine, m.id, "running")
    assert attached == [m.id]
    async with asyncssh.connect("127.0.0.1", m.ssh_port, username=m.ssh_user, client_keys=[ssh_key],
                                known_hosts=None, agent_path=None, connect_timeout=5) as conn:
        assert (await conn.run("true")).exit_status == 0

"""An allocation's SSH steps share one login per machine (activities/ssh_sessions.py): WAIT_SSH
logs in and holds the connection, PROBE_GPUS (the last step) reuses and closes it. A held
connection that died is replaced by a fresh login; the pool closes the least recently used past
its limit and what lies unused past its idle time. Logins counted by the machine's SSH server."""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest
from sqlmodel import Session
from temporalio.testing import ActivityEnvironment

from activities import machine_ssh
from activities.deps import ActivityDeps
from activities.ssh import SshActivities
from activities.ssh_sessions import MachineSessions, Opener
from fakeclouds.ssh import MachineSSH
from messages.activities import SshTarget
from store.models import Instance
from store.secrets import SecretBox
from tests import migrated


@dataclass
class Machine:
    deps: ActivityDeps
    server: MachineSSH
    port: int
    logins: list[int]

    def target(self, allocation_id: str) -> SshTarget:
        return SshTarget(host=self.server.host or "", port=self.port, user="ubuntu",
                         allocation_id=allocation_id, poll_interval_s=0.1)


@pytest.fixture
async def machine(tmp_path: Path, secret_box: SecretBox) -> AsyncIterator[Machine]:
    engine = migrated.sqlite_engine(tmp_path / "app.db")
    deps = ActivityDeps(engine=engine, box=secret_box, installation_id="sess0001")
    home = Path(tempfile.mkdtemp(prefix="ss", dir="/tmp"))
    logins: list[int] = []
    server = MachineSSH(home=home, host_key=asyncssh.generate_private_key("ssh-ed25519"), user="ubuntu",
                        public_keys=[deps.public_key()], env={"PATH": "/usr/bin:/bin"},
                        on_login=lambda: logins.append(1))
    port = await server.start(f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.7")
    with Session(engine) as s:
        for a in ("a1", "a2"):
            s.add(Instance(id=a, provider="lambda", connection_id="c1", workflow_id=f"wf-{a}",
                           cloud_instance_id=f"m-{a}", key=f"k-{a}"))
        s.commit()
    try:
        yield Machine(deps, server, port, logins)
    finally:
        await deps.ssh_sessions.close_all()
        await server.stop()
        engine.dispose()
        shutil.rmtree(home, ignore_errors=True)


async def test_an_allocations_ssh_steps_share_one_login_closed_after_the_last(machine: Machine) -> None:
    ssh, t = SshActivities(machine.deps), machine.target("a1")
    await ActivityEnvironment().run(ssh.wait_ssh, t)
    assert len(machine.logins) == 1 and len(machine.deps.ssh_sessions) == 1  # held for the next step
    assert await ActivityEnvironment().run(ssh.probe_gpus, t) == []  # no nvidia-smi here: no GPUs
    assert len(machine.logins) == 1, "the GPU check reused WAIT_SSH's login"
    assert len(machine.deps.ssh_sessions) == 0, "the last step closes it"
    # Another allocation on the same address is its own login (and its own host-key pin).
    await ActivityEnvironment().run(ssh.wait_ssh, machine.target("a2"))
    assert len(machine.logins) == 2


async def test_a_held_connection_that_died_is_replaced_by_a_fresh_login(machine: Machine) -> None:
    ssh, t = SshActivities(machine.deps), machine.target("a1")
    await ActivityEnvironment().run(ssh.wait_ssh, t)
    for held in machine.deps.ssh_sessions._held.values():
        held.conn.abort()  # the machine dropped it (a reboot, the network)
    assert await ActivityEnvironment().run(ssh.probe_gpus, t) == []
    assert len(machine.logins) == 2 and len(machine.deps.ssh_sessions) == 0


async def test_the_pool_is_bounded_by_count_and_by_idle_time(machine: Machine) -> None:
    def opener(allocation_id: str) -> Opener:
        @asynccontextmanager
        async def login() -> AsyncIterator[asyncssh.SSHClientConnection]:
            host = machine.server.host or ""
            r = await machine_ssh.route(machine.deps, host, allocation_id=allocation_id)
            async with machine_ssh.connect(machine.deps, host, machine.port, "ubuntu", r) as conn:
                yield conn
        return login

    pool = MachineSessions(limit=1, idle_s=3600)
    try:
        host = machine.server.host or ""
        for a in ("a1", "a2"):
            result = await pool.run((a, host, machine.port, "ubuntu"), opener(a), "echo hi", keep=True)
            assert result.stdout == "hi\n"
        assert len(pool) == 1 and ("a2", host, machine.port, "ubuntu") in pool._held  # a1 closed first
        pool.idle_s = 0.0  # everything held is now past its idle time: closed at the next use
        await pool.run(("a1", host, machine.port, "ubuntu"), opener("a1"), "true", keep=False)
        assert len(pool) == 0 and len(machine.logins) == 3
    finally:
        await pool.close_all()

"""The lease (dead-man switch), run by the watch's real sample login (activities/idle.py `_read`)
against simulated machines, with lease hours scaled to seconds: renewed, no machine ends; not
renewed (the worker stopped), a machine whose cloud can end its own bill ends it within its lease,
and one on a cloud that cannot keeps billing and is reported as such."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import asyncssh
import pytest

from activities import idle, lease, metrics
from fakeclouds.engine import RUNNING, TERMINATED, Engine, Machine
from messages.allocation import AllocateRequest
from providers import registry
from providers.ssh_fleet import SshFleetProvider
from store.models import Instance
from tests.deadman.test_guest_power import _boot
from tests.fakeclouds.helpers import eventually

LEASE_H = 2.0  # hours: 2 s with GPUPROV_LEASE_HOUR_S=1
LONG_H = 60.0  # a lease no delayed round runs out


@pytest.fixture
def scaled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lease.HOUR_S_ENV, "1")  # a lease hour lasts a second
    monkeypatch.setenv(lease.POLL_S_ENV, "0.1")  # the machine's timer looks ten times a second


def _fake_provider(cloud: str) -> Any:
    """A FAKE adapter: `_read` needs only its capabilities (and that it is no fleet)."""
    return SimpleNamespace(capabilities=registry.capabilities(cloud))


def _row(m: Machine, cloud: str, hours: float | None = LEASE_H) -> Instance:
    return Instance(id=f"a-{m.id}", provider=cloud, connection_id="c", workflow_id="w", ssh_host=m.address,
                    ssh_port=m.ssh_port, ssh_user=m.ssh_user, lease_hours=hours)


@pytest.fixture
def fake_login(monkeypatch: pytest.MonkeyPatch, ssh_key: asyncssh.SSHKey) -> None:
    """FAKE route and login for `_read`: straight to the simulated machine with the test's key
    (the real ones read the row's pinned host key and the installation's key from the database)."""
    async def fake_route(deps: Any, host: str, **_: Any) -> Any:
        return None

    @contextlib.asynccontextmanager
    async def fake_connect(deps: Any, host: str, port: int, user: str, r: Any,
                           timeout_s: float = 10.0) -> AsyncIterator[asyncssh.SSHClientConnection]:
        async with asyncssh.connect(host, port, username=user, client_keys=[ssh_key], known_hosts=None,
                                    agent_path=None, connect_timeout=timeout_s) as conn:
            yield conn

    monkeypatch.setattr(idle.machine_ssh, "route", fake_route)
    monkeypatch.setattr(idle.machine_ssh, "connect", fake_connect)


def lease_deadline(home: Path) -> int:
    """A machine's lease: when it runs out, in epoch seconds of its (here: this host's) clock."""
    return int((home / ".gpuprov" / "lease").read_text())


def _deadline(engine: Engine, m: Machine) -> int:
    return lease_deadline(engine.machine_home(m))


async def _watch_round(cloud: str, m: Machine, row: Instance) -> None:
    reading = await idle._read(None, _fake_provider(cloud), row)  # type: ignore[arg-type]
    assert reading.error is None, reading  # the sample itself is unchanged by the renewal


@pytest.mark.usefixtures("scaled", "fake_login")
async def test_renewed_none_ends_unrenewed_each_ends_itself(engine: Engine, pubkey: str) -> None:
    clouds: dict[str, dict[str, str]] = {"aws": {"shutdown_behavior": "terminate"}, "local": {}, "runpod": {},
                                          "lambda": {}}
    machines = {c: await _boot(engine, c, pubkey, **extra) for c, extra in clouds.items()}
    rows = {c: _row(m, c) for c, m in machines.items()}
    assert [c for c in clouds if lease.leased(_fake_provider(c), rows[c])] == ["aws", "local", "runpod"]
    assert registry.capabilities("lambda").self_end.method == "none"  # what the allocation shows

    # The watch running: every round renews (one login per machine per round), each pushing the
    # machine's deadline to a lease from then. Its rounds renew the long lease: a round delayed on a
    # busy host cannot let it run out (how long a round takes is not what this test is about).
    logins = engine.calls.logins_json()
    long_rows = {c: _row(m, c, hours=LONG_H) for c, m in machines.items()}
    seen: dict[str, int] = {}
    for _ in range(3):
        started = int(time.time())
        await asyncio.gather(*(_watch_round(c, machines[c], long_rows[c]) for c in clouds))
        for c in ("aws", "local", "runpod"):
            deadline = _deadline(engine, machines[c])
            assert deadline >= started + LONG_H and deadline >= seen.get(c, 0), (c, deadline, started)
            seen[c] = deadline
        await asyncio.sleep(0.3)
    assert all(m.status == RUNNING for m in machines.values())
    assert not (engine.machine_home(machines["lambda"]) / ".gpuprov" / "lease").exists()  # never leased
    # The watch's last round before the worker stops renews the allocation's own (short) lease.
    await asyncio.gather(*(_watch_round(c, machines[c], rows[c]) for c in clouds))
    after = engine.calls.logins_json()
    assert all(after[m.id] - logins.get(m.id, 0) == 4 for m in machines.values())  # no extra login

    # The worker stopped: nobody renews. Each self-ending machine ends its bill within its lease.
    stopped_at = time.time()
    for c in ("aws", "local", "runpod"):
        m = machines[c]

        def ended(m: Machine = m) -> bool:
            return m.status == TERMINATED

        await eventually(ended, f"the {c} machine to end itself")
        assert m.ended_at is not None and m.ended_at - stopped_at < LEASE_H + 10  # (10 s: a busy host)
        assert m.ended_at >= stopped_at + LEASE_H - 2  # not before its lease (the last round renewed it)
    lam = machines["lambda"]  # nothing there can end its bill: it runs and bills on, and says so
    assert lam.status == RUNNING and lam.ended_at is None


def test_no_lease_for_fleet_hosts_nor_when_off() -> None:
    fleet = SshFleetProvider.__new__(SshFleetProvider)  # a fleet host: a user's own, never leased
    row = Instance(id="a", provider="ssh", connection_id="c", workflow_id="w", lease_hours=12)
    assert not lease.leased(fleet, row) and lease.command_for(fleet, row) == ""
    aws = _fake_provider("aws")
    assert not lease.leased(aws, row.model_copy(update={"lease_hours": 0}))  # 0: off
    assert not lease.leased(aws, row.model_copy(update={"lease_hours": None}))  # started before leases
    assert lease.leased(aws, row)


def test_lease_hours_are_validated() -> None:
    base = {"allocation_id": "a", "connection_id": "c", "cloud": "aws", "ssh_public_keys": ["k"]}
    assert AllocateRequest(**base).lease_hours is None  # histories from before leases still decode
    assert AllocateRequest(**base, lease_hours=0).lease_hours == 0
    for bad in (-1, 721):
        with pytest.raises(ValueError):
            AllocateRequest(**base, lease_hours=bad)


@pytest.mark.usefixtures("scaled", "fake_login")
async def test_a_lease_that_cannot_be_written_is_counted_and_the_sample_still_read(
        engine: Engine, pubkey: str) -> None:
    m = await _boot(engine, "local", pubkey)
    home = engine.machine_home(m)
    (home / ".gpuprov").unlink(missing_ok=True)
    (home / ".gpuprov").write_text("not a directory\n")  # mkdir -p fails: nowhere to write the lease
    before = metrics.value("gpuprov_lease_not_renewed_total", cloud="local")
    await _watch_round("local", m, _row(m, "local"))  # asserts the sample itself was read
    assert metrics.value("gpuprov_lease_not_renewed_total", cloud="local") == before + 1
    (home / ".gpuprov").unlink()
    await _watch_round("local", m, _row(m, "local"))  # writable again: renewed, nothing counted
    assert metrics.value("gpuprov_lease_not_renewed_total", cloud="local") == before + 1
    assert (home / ".gpuprov" / "lease").exists()
    (home / ".gpuprov" / "lease").unlink()  # the timer's cue to stop

"""The dead-man switch end to end (issue 25, part 3): machines allocated through the API and the
real worker, their leases renewed by the connection's real WatchWorkflow (in the SSH login its idle
sample makes each round), lease hours scaled to half-seconds. With the worker running no machine
ends; with the worker stopped (the control plane gone) the one on a cloud that can end its own bill
(simulated `local`: a guest shutdown ends it) ends itself within its lease, and the one on a cloud
that cannot (Lambda: `self_end` none, shown on the instance) is never leased and keeps billing.
The host is untouched: the machine's `shutdown` is the simulation's (tests/deadman/)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlmodel import Session

from activities import lease
from activities.watch import start_watch
from messages import workflows as wf
from messages.ids import watch_workflow_id
from tests import simclouds
from tests.deadman.test_lease import lease_deadline
from tests.eventually import eventually
from tests.jobs.conftest import CLOUD, Stack
from workflows import client_calls

HOUR_S = 0.5  # a lease hour, scaled
LONG_HOUR_S = 10.0  # a lease hour while the machines come up: 80 s
LEASE_H = 8.0  # 4 s
WATCH_S = 0.3  # between watch rounds (each renews)


async def _allocate(stack: Stack, cloud: str) -> dict[str, Any]:
    r = await stack.http.post("/api/compute/instances", json={
        "cloud": cloud, "gpu": "a10" if cloud == CLOUD else None, "k3s": False, "lease_hours": LEASE_H,
        "ssh_public_keys": [stack.deps.public_key()]})
    assert r.status_code == 202, r.text
    iid = r.json()["id"]

    async def ready() -> dict[str, Any] | None:
        body: dict[str, Any] = (await stack.http.get(f"/api/compute/instances/{iid}")).json()
        if body["status"] == "failed":
            raise AssertionError(body)
        return body if body["status"] == "ready" else None

    got: dict[str, Any] = await eventually(ready, within=90, what=f"{cloud} instance {iid} ready")
    return got


async def _machine(stack: Stack, instance: dict[str, Any]) -> dict[str, Any]:
    """The simulated machine the instance runs on (its SSH address and port)."""
    ssh = instance["ssh"]
    [m] = [m for m in await stack.sim.admin.aio.live_machines()
           if (m["address"], m["ssh_port"]) == (ssh["host"], ssh["port"])]
    return m


async def test_a_leased_machine_ends_itself_only_once_the_worker_is_gone(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    # While the machines come up and the watch runs, a lease hour lasts LONG_HOUR_S: a slow
    # allocation or a delayed round on a busy host cannot let the lease run out (how fast those are
    # is not what this test is about); the watch's last rounds renew it with the short hour.
    monkeypatch.setenv(lease.HOUR_S_ENV, str(LONG_HOUR_S))
    monkeypatch.setenv(lease.POLL_S_ENV, "0.1")
    with Session(stack.deps.engine) as s, simclouds.allowed(stack.deps, stack.sim):
        local = simclouds.add_connection(s, stack.deps.box, stack.sim, "local")
    leased, unleased = await _allocate(stack, "local"), await _allocate(stack, CLOUD)
    assert leased["self_end"]["method"] == "shutdown" and leased["lease_hours"] == LEASE_H
    assert unleased["self_end"]["method"] == "none"  # reported: nothing on a Lambda machine ends its bill
    m_local, m_lam = await _machine(stack, leased), await _machine(stack, unleased)
    home = stack.home_of(m_local)
    # Written at ready, by the allocation's last SSH step (no watch has run yet); none on Lambda.
    at_ready = lease_deadline(home)
    assert not (stack.home_of(m_lam) / ".gpuprov" / "lease").exists()
    lam = next(c for c in (await stack.http.get("/api/compute/providers")).json()["items"]
               if c["provider"] == CLOUD)["id"]
    for conn in (local, lam):
        await start_watch(stack.client, stack.queue, conn, WATCH_S)

    # The worker running: each round renews, pushing the deadline on; nothing ends.
    await eventually(lambda: lease_deadline(home) > at_ready, within=60,
                     what="a watch round renewing the lease")
    monkeypatch.setenv(lease.HOUR_S_ENV, str(HOUR_S))
    short_s = LEASE_H * HOUR_S
    await eventually(lambda: lease_deadline(home) <= time.time() + short_s + 1, within=60,
                     what="a watch round renewing the lease with the short hour")
    alive = {m["id"]: m["status"] for m in await stack.sim.admin.aio.machines()}
    assert alive[m_local["id"]] != "terminated" and alive[m_lam["id"]] != "terminated", alive

    await stack.stop_worker()  # the control plane is gone: nobody renews
    stopped = time.monotonic()
    try:
        async def ended() -> dict[str, Any] | None:
            m: dict[str, Any] = await stack.sim.admin.aio.machine(m_local["id"])
            return m if m["status"] == "terminated" else None

        gone = await eventually(ended, within=60, what="the leased machine ending itself")
        # Within its lease (plus the timer's look and the simulation's teardown), and by its own hand.
        assert time.monotonic() - stopped < LEASE_H * HOUR_S + 30
        assert gone["status"] == "terminated"
        assert "shutdown -h now" in (home.parent / "power.log").read_text()  # the shim, not the host's
        lam_now = await stack.sim.admin.aio.machine(m_lam["id"])
        assert lam_now["status"] != "terminated"  # Lambda: still running, still billing
        before = lam_now["billing_seconds"]
        await eventually(lambda: _billing_grew(stack, m_lam["id"], before), within=10,
                         what="the Lambda machine still billing")
    finally:
        await stack.start_worker()
        for conn in (local, lam):
            await client_calls.signal(stack.client, watch_workflow_id(conn), wf.WATCH.stop)
        for inst in (leased, unleased):
            await stack.http.delete(f"/api/compute/instances/{inst['id']}")


async def _billing_grew(stack: Stack, machine_id: str, before: float) -> bool | None:
    m = await stack.sim.admin.aio.machine(machine_id)
    return True if m["billing_seconds"] > before else None

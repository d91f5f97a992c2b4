"""SIGKILL a real worker process after Nebius, Modal and OCI each accepted a create but before any
answer came back, then restart it: each allocation still ends with exactly one machine (Nebius's
retried Create carries the same `x-idempotency-key` and finds the instance by name; Modal's sandbox
name is taken, and the adapter adopts the sandbox it names; OCI's launch carries the key as its
`opc-retry-token`), and terminate leaves nothing.

The clouds share one worker and one kill: a crash test costs a worker start and a Temporal round
trip or two. Docker's engine is real, not the simulation: its crash test is test_docker_crash.py
(the held answer comes from its fault proxy). Fixtures as in tests/aws/test_crash.py."""

from __future__ import annotations

import asyncio
import uuid

import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client

from fakeclouds.server import FakeCloudServer
from messages.allocation import AllocateRequest
from messages.enums import Phase
from messages.ids import attempt_key
from store.secrets import SecretBox
from tests import simclouds
from tests.aws.test_crash import client_start
from tests.crash.conftest import (  # noqa: F401 — fixtures, used by name
    WorkerProcess,
    clean_sim,
    installation,
    sim,
    worker_process,
)
from tests.crash.test_worker_crash import TIMING, USER_KEY, until
from tests.workflows.conftest import settled, terminate

CLOUDS = ("nebius", "modal", "oci")


def machines_of(server: FakeCloudServer, cloud: str, key: str) -> list[dict[str, object]]:
    """`cloud`'s simulated machines of the key: by label, or (OCI keeps its tags to itself) by name."""
    return [m for m in server.admin.machines() if m["facade"] == cloud
            and (m["labels"].get("gpuprov-key") == key or str(m.get("name") or "").endswith(f"-{key}"))]


async def test_kill_after_each_new_cloud_accepted_the_create(
        temporal_client: Client, sim: FakeCloudServer, worker_process: WorkerProcess,  # noqa: F811
        installation: str, db_engine: sa.Engine, secret_box: SecretBox) -> None:  # noqa: F811
    allocations: dict[str, str] = {}
    handles = {}
    for cloud in CLOUDS:
        with Session(db_engine) as s:
            connection = simclouds.add_connection(s, secret_box, sim, cloud)
        # The create takes effect, then its answer is held long past the kill.
        sim.admin.add_fault(cloud, "create", "latency", when="after", seconds=60)
        allocations[cloud] = f"crash-{uuid.uuid4().hex[:8]}"
        req = AllocateRequest(allocation_id=allocations[cloud], connection_id=connection, cloud=cloud,
                              spot=False, k3s=False, ssh_public_keys=[USER_KEY], timing=TIMING)
        handles[cloud] = await client_start(temporal_client, req)
    keys = {cloud: attempt_key(a, 1) for cloud, a in allocations.items()}

    await until(lambda: all(len(machines_of(sim, c, keys[c])) == 1 for c in CLOUDS))
    worker_process.kill()
    sim.admin.clear_faults()
    worker_process.start()

    states = dict(zip(CLOUDS, await asyncio.gather(*(settled(handles[c]) for c in CLOUDS)), strict=True))
    for cloud, st in states.items():
        assert st.phase == Phase.READY and st.ref is not None, (cloud, st.error)
        made = machines_of(sim, cloud, keys[cloud])
        assert [m["id"] for m in made] == [st.ref.instance_id], (cloud, made)  # found, not launched again

    for cloud, allocation_id in allocations.items():
        assert (await terminate(temporal_client, allocation_id)).phase == Phase.TERMINATED, cloud
        async with simclouds.provider(sim, cloud, installation_id=installation) as p:
            assert await p.list_owned() == [], cloud

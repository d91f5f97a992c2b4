"""SIGKILL a real worker process after EC2 accepted the launch but before its answer came back, with
the new instance hidden from listings (eventual consistency): the restarted worker's retried create
finds nothing by tag, and the ClientToken alone makes EC2 return the first launch. One machine.

tests/crash is not parametrized by cloud, so this uses its fixtures for AWS here."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client, WorkflowHandle

from fakeclouds import aws_api
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState
from messages.enums import Phase
from messages.ids import allocation_workflow_id, attempt_key
from store.secrets import SecretBox
from tests import simclouds
from tests.crash.conftest import (  # noqa: F401 — fixtures, used by name
    TASK_QUEUE,
    WorkerProcess,
    clean_sim,
    installation,
    sim,
    worker_process,
)
from tests.crash.test_worker_crash import TIMING, USER_KEY, until
from tests.workflows.conftest import settled, terminate


def machines_of(server: FakeCloudServer, key: str) -> list[dict[str, object]]:
    return [m for m in server.admin.machines() if m["labels"].get("gpuprov-key") == key]


async def test_kill_after_ec2_accepted_the_launch(temporal_client: Client, sim: FakeCloudServer,  # noqa: F811
                                                  worker_process: WorkerProcess,  # noqa: F811
                                                  installation: str,  # noqa: F811
                                                  db_engine: sa.Engine, secret_box: SecretBox) -> None:
    with Session(db_engine) as s:
        connection = simclouds.add_connection(s, secret_box, sim, "aws")
    state = aws_api.sim_of(sim.engine)
    state.listing_delay = 30.0  # the retried create's tag lookup cannot see the first launch
    sim.admin.add_fault("aws", "create", "latency", when="after", seconds=30)
    try:
        allocation_id = f"crash-{uuid.uuid4().hex[:8]}"
        key = attempt_key(allocation_id, 1)
        req = AllocateRequest(allocation_id=allocation_id, connection_id=connection, cloud="aws",
                              region="us-east-1", gpu="T4", spot=False, k3s=False,
                              ssh_public_keys=[USER_KEY], timing=TIMING)
        handle = await client_start(temporal_client, req)
        await until(lambda: len(machines_of(sim, key)) == 1)  # EC2 launched it; the answer is held
        worker_process.kill()
        sim.admin.clear_faults()
        worker_process.start()
        st = await settled(handle)
        assert st.phase == Phase.READY and st.ref is not None
        made = machines_of(sim, key)
        assert [m["id"] for m in made] == [st.ref.instance_id], made  # the token found it: no second one
    finally:
        state.listing_delay = 0.0
    assert (await terminate(temporal_client, allocation_id)).phase == Phase.TERMINATED
    async with simclouds.provider(sim, "aws", installation_id=installation) as p:
        assert await p.list_owned() == []  # no instance and no security group left


async def client_start(client: Client, req: AllocateRequest) -> WorkflowHandle[Any, AllocationState]:
    return await client.start_workflow(wf.ALLOCATION.name, AllocationInput(request=req),
                                       id=allocation_workflow_id(req.allocation_id), task_queue=TASK_QUEUE,
                                       result_type=AllocationState)

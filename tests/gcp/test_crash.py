"""tests/crash is written for the `local` cloud; this is its first case on Compute Engine: a real
worker process SIGKILLed after the simulated Compute Engine accepted the insert (its answer held
back), restarted: the allocation completes with exactly one instance (the retried insert carries
the same requestId and name), and terminate leaves nothing, as the official SDK shows."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from google.cloud import compute_v1
from sqlmodel import Session
from temporalio.client import Client

from fakeclouds.gcp_auth import PROJECT
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState
from messages.enums import Phase
from messages.ids import allocation_workflow_id, attempt_key
from providers.gcp import instance_name
from store.secrets import SecretBox
from tests import simclouds
from tests.crash.conftest import TASK_QUEUE, WorkerProcess, installation, worker_process  # noqa: F401
from tests.crash.test_worker_crash import TIMING, USER_KEY
from tests.eventually import eventually
from tests.workflows.conftest import settled, terminate


def instances_named(sim: FakeCloudServer, name: str) -> list[dict[str, Any]]:
    return [m for m in sim.admin.machines() if m["name"] == name]


async def test_kill_after_compute_engine_accepted_the_insert(
    temporal_client: Client,
    sim_clean: FakeCloudServer,
    worker_process: WorkerProcess,  # noqa: F811
    installation: str,  # noqa: F811
    db_engine: sa.Engine,
    secret_box: SecretBox,
    sdk: Callable[[str], Any],
) -> None:
    with Session(db_engine) as s:
        conn = simclouds.add_connection(s, secret_box, sim_clean, "gcp")
    # The insert takes effect, then its answer is held back: the worker dies in between.
    sim_clean.admin.add_fault("gcp", "create", "latency", when="after", seconds=30)
    allocation_id = f"crash-{uuid.uuid4().hex[:8]}"
    key = attempt_key(allocation_id, 1)
    name = instance_name(installation, key)
    req = AllocateRequest(
        allocation_id=allocation_id,
        connection_id=conn,
        cloud="gcp",
        region="us-central1",
        gpu="t4",
        k3s=False,
        ssh_public_keys=[USER_KEY],
        timing=TIMING,
    )
    handle = await temporal_client.start_workflow(
        wf.ALLOCATION.name,
        AllocationInput(request=req),
        id=allocation_workflow_id(allocation_id),
        task_queue=TASK_QUEUE,
        result_type=AllocationState,
    )
    await eventually(lambda: instances_named(sim_clean, name), within=60, what=f"the instance {name} made")
    worker_process.kill()
    sim_clean.admin.clear_faults()
    worker_process.start()

    state = await asyncio.wait_for(settled(handle), 90)
    assert state.phase == Phase.READY
    made = instances_named(sim_clean, name)
    assert len(made) == 1, made  # the retried insert found the first; it made no second one
    assert state.ref is not None and state.ref.instance_id == made[0]["id"] and made[0]["status"] == "running"

    assert (await terminate(temporal_client, allocation_id)).phase == Phase.TERMINATED
    request = compute_v1.AggregatedListInstancesRequest(
        project=PROJECT, filter=f'labels.gpuprov-key = "{key}"'
    )
    assert [
        i for _, scoped in sdk("InstancesClient").aggregated_list(request=request) for i in scoped.instances
    ] == []
    firewalls = sdk("FirewallsClient").list(request=compute_v1.ListFirewallsRequest(project=PROJECT))
    assert name not in [f.name for f in firewalls]

"""Terminate removes everything carrying the allocation's key: a Lambda twin that slipped through,
and the firewall ruleset of a launch that never happened."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState
from messages.enums import Phase
from messages.ids import allocation_workflow_id, attempt_key
from tests.sweep.conftest import (
    PUBLIC_KEY,
    TASK_QUEUE,
    alive,
    launch_twin,
    new_allocation_id,
    provider,
    side_objects,
)
from tests.workflows.conftest import FAST, settled


async def allocate(client: Client, connection_id: str) -> tuple[AllocateRequest, WorkflowHandle[Any, Any]]:
    """A Lambda allocation asking for a port: its machine gets a firewall ruleset (a side resource)."""
    req = AllocateRequest(allocation_id=new_allocation_id(), connection_id=connection_id, cloud="lambda",
                          gpu="a10", k3s=False, ssh_public_keys=[PUBLIC_KEY], ports=[8080], timing=FAST)
    handle = await client.start_workflow(
        wf.ALLOCATION.name, AllocationInput(request=req), id=allocation_workflow_id(req.allocation_id),
        task_queue=TASK_QUEUE, result_type=AllocationState)
    return req, handle


async def test_terminate_removes_a_twin_under_the_allocations_key(temporal_client: Client, sweep_worker: None,
                                                                  sim: FakeCloudServer, connect: Any) -> None:
    _, handle = await allocate(temporal_client, connect("lambda"))
    st = await settled(handle)
    assert st.phase == Phase.READY and st.ref is not None
    twin = await launch_twin(sim, st.ref)

    done = await handle.execute_update(wf.ALLOCATION.terminate.name, result_type=AllocationState)

    assert done.phase == Phase.TERMINATED
    assert not await alive(sim, st.ref.instance_id) and not await alive(sim, twin)
    async with provider(sim, "lambda") as p:
        assert await p.find_all(st.ref.key) == [] and await p.list_owned() == []
    assert await side_objects(sim, st.ref.key) == []


async def test_a_launch_that_never_happens_leaves_no_side_resource(
        temporal_client: Client, sweep_worker: None, sim: FakeCloudServer, connect: Any) -> None:
    """Every launch answers 503 after the firewall ruleset was made; the worker gives up on the
    create and compensates by key: no machine was made, and the ruleset goes too."""
    await sim.admin.aio.add_fault("lambda", "create", "server_error", times=-1, status=503)
    try:
        req, handle = await allocate(temporal_client, connect("lambda"))
        with pytest.raises(WorkflowFailureError):
            await settled(handle)
    finally:
        await sim.admin.aio.clear_faults()
    st = await handle.query(wf.ALLOCATION.state.name, result_type=AllocationState)
    key = attempt_key(req.allocation_id, 1)
    assert st.phase == Phase.FAILED and [a.key for a in st.attempts] == [key]
    assert [m for m in await sim.admin.aio.machines() if key in (m.get("name") or "")] == []
    made = (await sim.admin.aio.call_counts())["lambda"].get("POST /firewall-rulesets", 0)
    assert made >= 1, "each create made the machine's ruleset before its launch"
    assert await side_objects(sim, key) == []

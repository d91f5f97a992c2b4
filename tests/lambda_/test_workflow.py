"""Ten allocations on Lambda at once, end to end (the real AllocationWorkflow on the Temporal dev
server, an in-process worker, the adapter, the simulated Lambda with its documented rate limits on,
at the session's time scale): every one becomes ready, the simulation refuses no call, and the
creates ran on Lambda's rate-limited launch queue."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.deps import ActivityDeps
from fakeclouds import lambda_api, lambda_firewall
from fakeclouds.server import FakeCloudServer
from messages import activities as acts
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState, Timing
from messages.enums import Phase
from messages.ids import allocation_workflow_id
from providers import kubeconfig
from store.secrets import SecretBox
from tests import kube, simclouds
from tests.lambda_.conftest import PUBLIC
from tests.recorded import replays
from tests.workflows.conftest import settled, terminate
from worker import build_worker
from workflows.allocation import launch_task_queue

TASK_QUEUE = "gpuprov-lambda-tests"
INSTALLATION = "lamtest1"
FAST = Timing(heartbeat_timeout_s=5, poll_interval_s=0.2, call_timeout_s=30, boot_timeout_s=60,
              ssh_timeout_s=20, k3s_timeout_s=30, max_retry_interval_s=1)


@pytest.fixture(scope="module")
async def lambda_worker(temporal_client: Client, db_engine: sa.Engine, secret_box: SecretBox,
                        lambda_sim: FakeCloudServer) -> AsyncIterator[None]:
    deps = ActivityDeps(engine=db_engine, box=secret_box, installation_id=INSTALLATION,
                        client=temporal_client, allowed_endpoints=simclouds.endpoints(lambda_sim))
    async with build_worker(temporal_client, deps, task_queue=TASK_QUEUE):
        yield


async def test_ten_allocations_at_once_under_the_limits(temporal_client: Client, lambda_worker: None,
                                                         sim: FakeCloudServer, db_engine: sa.Engine,
                                                         secret_box: SecretBox) -> None:
    with Session(db_engine) as s:
        connection = simclouds.add_connection(s, secret_box, sim, "lambda")
    sim.admin.set_stock("gpu_1x_a10", "us-east-1", 10)
    requests = [AllocateRequest(allocation_id=f"lam-{uuid.uuid4().hex[:8]}", connection_id=connection,
                                cloud="lambda", region="us-east-1", gpu="a10", k3s=False,
                                ssh_public_keys=[PUBLIC], timing=FAST) for _ in range(10)]
    handles = await asyncio.gather(*(
        temporal_client.start_workflow(wf.ALLOCATION.name, AllocationInput(request=req),
                                       id=allocation_workflow_id(req.allocation_id), task_queue=TASK_QUEUE,
                                       result_type=AllocationState) for req in requests))
    states = await asyncio.gather(*(settled(h) for h in handles))
    assert [st.phase for st in states] == [Phase.READY] * 10
    assert len({st.ref.instance_id for st in states if st.ref}) == 10
    assert all(len(st.attempts) == 1 for st in states), "no attempt failed (a 429 would have been retried)"
    assert lambda_api.rate_limited(sim.engine) == 0, "the simulation refused calls for their rate"

    history = await handles[0].fetch_history()
    queues = [e.activity_task_scheduled_event_attributes.task_queue.name for e in history.events
              if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
              and e.activity_task_scheduled_event_attributes.activity_type.name == acts.CREATE_INSTANCE.name]
    assert queues == [launch_task_queue(TASK_QUEUE, "lambda")]

    done = await asyncio.gather(*(terminate(temporal_client, req.allocation_id) for req in requests))
    assert [st.phase for st in done] == [Phase.TERMINATED] * 10
    async with simclouds.provider(sim, "lambda", installation_id=INSTALLATION) as p:
        assert await p.list_owned() == []
    assert lambda_api.rate_limited(sim.engine) == 0


async def test_k3s_ready_for_a_direct_client_only_from_the_networks_asked(
        temporal_client: Client, lambda_worker: None, sim: FakeCloudServer, db_engine: sa.Engine,
        secret_box: SecretBox) -> None:
    """k3s on (the default) with k8s_api_from: the create opens 6443 to that network only (the
    machine's own ruleset), k3s serves a certificate for the machine's address, and the node
    advertises its GPU to a client that verifies it; the history is kept (GPUPROV_RECORD_HISTORIES)."""
    with Session(db_engine) as s:
        connection = simclouds.add_connection(s, secret_box, sim, "lambda")
    req = AllocateRequest(allocation_id=f"lam-{uuid.uuid4().hex[:8]}", connection_id=connection,
                          cloud="lambda", region="us-east-1", gpu="a10", ssh_public_keys=[PUBLIC],
                          k8s_api_from=["127.0.0.1/32"], timing=FAST)
    handle = await temporal_client.start_workflow(
        wf.ALLOCATION.name, AllocationInput(request=req), id=allocation_workflow_id(req.allocation_id),
        task_queue=TASK_QUEUE, result_type=AllocationState)
    st = await settled(handle)
    assert st.phase == Phase.READY and st.ref and st.host, st.error
    assert "Kubernetes API (6443) opened at create to 127.0.0.1/32 only" in st.notes
    machine = sim.engine.machines[st.ref.instance_id]
    rules = lambda_firewall.ingress(sim.engine, machine)  # what the machine's firewall lets in
    assert (6443, 6443, "127.0.0.1/32") in rules and [r for r in rules if r[0] <= 6443 <= r[1]] == [
        (6443, 6443, "127.0.0.1/32")]
    raw = (sim.engine.machine_home(machine) / ".simulated-k3s" / "k3s.yaml").read_text()  # the machine's disk
    nodes = await asyncio.to_thread(kube.list_nodes, kubeconfig.pointed_at(
        raw, kubeconfig.server_url(st.host), "t"))
    assert [kube.gpus_of(n) for n in nodes] == ["1"]

    assert (await terminate(temporal_client, req.allocation_id)).phase == Phase.TERMINATED
    await replays(temporal_client, handle.id)


def test_a_cloud_with_a_launch_rate_always_has_a_launch_queue_worker() -> None:
    """The workflow sends such a cloud's creates to its launch queue whatever the pacing: with
    pacing off (scale 0, the bench) the queue still has a worker, unlimited, or creates would wait
    forever."""
    from worker import launch_rates

    assert launch_rates(0)["lambda"] is None
    assert launch_rates(1.0)["lambda"] == pytest.approx(1 / 12)
    assert launch_rates(0.5)["lambda"] == pytest.approx(1 / 6)
    assert launch_rates(0)["vastai"] is None  # Vast.ai's create: one per 4.5 s per key
    assert launch_rates(1.0)["vastai"] == pytest.approx(1 / 4.5)
    assert set(launch_rates(1.0)) == {"lambda", "vastai"}

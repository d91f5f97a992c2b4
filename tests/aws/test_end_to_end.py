"""An allocation on AWS end to end: the real AllocationWorkflow on the Temporal dev server, an
in-process worker with the real activities, the AWS adapter on boto3, the simulated EC2 with real
SSH machines on their own 127.x addresses, port 22."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncssh
import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client, WorkflowHandle

from activities.deps import ActivityDeps
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState, Timing
from messages.enums import Phase
from messages.ids import allocation_workflow_id
from store.secrets import SecretBox
from tests import simclouds
from tests.aws.conftest import USER_KEY, boto
from tests.aws.test_adapter import ours
from tests.workflows.conftest import settled, terminate
from worker import build_worker

TASK_QUEUE = "gpuprov-aws-tests"
INSTALLATION = "awstest1"
FAST = Timing(heartbeat_timeout_s=5, poll_interval_s=0.2, call_timeout_s=30, boot_timeout_s=60,
              ssh_timeout_s=20, k3s_timeout_s=30, max_retry_interval_s=1)


@pytest.fixture(scope="module")
async def aws_worker(temporal_client: Client, db_engine: sa.Engine, secret_box: SecretBox,
                     aws_sim: FakeCloudServer) -> AsyncIterator[None]:
    deps = ActivityDeps(engine=db_engine, box=secret_box, installation_id=INSTALLATION,
                        client=temporal_client, allowed_endpoints=simclouds.endpoints(aws_sim))
    async with build_worker(temporal_client, deps, task_queue=TASK_QUEUE):
        yield
    await deps.aclose()  # its adapters' CA files (as a worker process does when it exits)


@pytest.fixture
def connection(sim: FakeCloudServer, db_engine: sa.Engine, secret_box: SecretBox) -> str:
    with Session(db_engine) as s:
        return simclouds.add_connection(s, secret_box, sim, "aws")


async def allocate(client: Client, connection: str, **kw: Any) -> WorkflowHandle[Any, AllocationState]:
    req = AllocateRequest(allocation_id=f"aws-{uuid.uuid4().hex[:8]}", connection_id=connection, cloud="aws",
                          region="us-east-1", ssh_public_keys=[USER_KEY.export_public_key().decode().strip()],
                          timing=FAST, **kw)
    return await client.start_workflow(wf.ALLOCATION.name, AllocationInput(request=req),
                                       id=allocation_workflow_id(req.allocation_id), task_queue=TASK_QUEUE,
                                       result_type=AllocationState)


async def test_allocate_log_in_as_ubuntu_on_22_and_terminate_leaves_nothing(
        temporal_client: Client, aws_worker: None, sim: FakeCloudServer, connection: str) -> None:
    # Zone a has no T4 left: the first attempt fails there for capacity, the next zone takes it.
    sim.admin.set_stock("g4dn.xlarge", "us-east-1a", 0)
    handle = await allocate(temporal_client, connection, gpu="T4", spot=False, ports=[8080])
    st = await settled(handle)
    assert st.phase == Phase.READY and st.host is not None and st.host.startswith("127.")
    assert st.ssh_port == 22 and st.ssh_user == "ubuntu"
    first, last = st.attempts[0], st.attempts[-1]
    assert (first.offer.zone, first.outcome) == ("us-east-1a", "capacity")
    assert first.reason and "InsufficientInstanceCapacity" in first.reason and "us-east-1b" in first.reason
    assert (last.offer.instance_type, last.offer.zone) == ("g4dn.xlarge", "us-east-1b")
    assert last.outcome == "created"
    assert len(st.gpus) == 1 and "T4" in st.gpus[0].name
    assert not any("k3s" in n for n in st.notes)  # installed (the image's simulated k3s), not skipped

    async with asyncssh.connect(st.host, port=22, username="ubuntu", client_keys=[USER_KEY],
                                known_hosts=None) as conn:  # the user's own key, as OpenSSH would
        assert (await conn.run("whoami; echo $HOME", check=True)).stdout
    ec2 = boto(sim)
    live, groups = ours(ec2, INSTALLATION)
    assert [i["InstanceId"] for i in live] == [st.ref.instance_id]  # type: ignore[union-attr]
    assert {p["FromPort"] for p in groups[0]["IpPermissions"]} == {22, 8080}

    done = await terminate(temporal_client, handle.id.removeprefix("allocation-"))
    assert done.phase == Phase.TERMINATED
    assert ours(ec2, INSTALLATION) == ([], [])  # boto3 sees no instance and no security group of ours

"""A Lambda launch that takes effect 6 s after it was sent — longer than the adapter's request
timeout (3 s here, GPUPROV_CLOUD_REQUEST_TIMEOUT_S; 30 s by default) — with and without the worker
killed meanwhile. Lambda has no idempotency token, so a naive
retry looks the name up, finds nothing yet, and launches a second machine. The create activity's
retry instead waits out Lambda's in-flight window, finds the first launch when it lands, and the
allocation ends with one machine; after terminate, none."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncssh
import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client, WorkflowHandle

from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState, Timing
from messages.enums import Phase
from messages.ids import allocation_workflow_id, attempt_key
from providers.rest import REQUEST_TIMEOUT_ENV
from store import creates_in_flight
from store.secrets import SecretBox
from tests import simclouds
from tests.crash.conftest import TASK_QUEUE, WorkerProcess
from tests.eventually import eventually
from tests.workflows.conftest import settled, terminate

TIMING = Timing(heartbeat_timeout_s=2, poll_interval_s=0.5, call_timeout_s=60, boot_timeout_s=60,
                ssh_timeout_s=30, max_retry_interval_s=1)
REQUEST_TIMEOUT_S = 3.0  # the worker's adapters give up on an answer after this
DELAY_S = 6  # the launch takes effect this long after it was sent: after the request timed out
USER_KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


@pytest.fixture(autouse=True)
def short_request_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the worker process starts (autouse fixtures come first): it inherits the setting."""
    monkeypatch.setenv(REQUEST_TIMEOUT_ENV, str(REQUEST_TIMEOUT_S))


@pytest.fixture
def lambda_connection(sim: FakeCloudServer, db_engine: sa.Engine, secret_box: SecretBox) -> str:
    with Session(db_engine) as s:
        return simclouds.add_connection(s, secret_box, sim, "lambda")


def ours(sim: FakeCloudServer, installation: str, allocation_id: str) -> list[dict[str, Any]]:
    """Every machine the simulated Lambda made for this allocation (terminated ones too)."""
    prefix = f"gpuprov-{installation}-gp-{allocation_id}-"
    return [m for m in sim.admin.machines() if str(m.get("name") or "").startswith(prefix)]


async def start(client: Client, connection: str) -> tuple[str, WorkflowHandle[Any, AllocationState]]:
    allocation_id = f"slow-{uuid.uuid4().hex[:8]}"
    req = AllocateRequest(allocation_id=allocation_id, connection_id=connection, cloud="lambda", gpu="a10",
                          k3s=False, ssh_public_keys=[USER_KEY], timing=TIMING)
    handle = await client.start_workflow(wf.ALLOCATION.name, AllocationInput(request=req),
                                         id=allocation_workflow_id(allocation_id), task_queue=TASK_QUEUE,
                                         result_type=AllocationState)
    return allocation_id, handle


async def launch_sent(engine: sa.Engine, key: str) -> None:
    """Until the create activity has recorded that its launch request is going out."""
    def recorded() -> bool:
        with Session(engine) as s:
            return creates_in_flight.sends_under(s, key)[1] is not None  # sent, not answered yet

    await eventually(recorded, within=30, what=f"the create of {key} recorded as in flight")


async def launch_arrived(sim: FakeCloudServer) -> None:
    """Until the simulated Lambda has received the launch: the fault (times=1) is drawn on arrival."""
    await eventually(sim.admin.aio.faults, until=lambda faults: not faults, within=30,
                     what="the launch to reach the simulated Lambda (its one-shot fault drawn)")


@pytest.mark.parametrize("kill_worker", [False, True], ids=["no-crash", "worker-killed"])
async def test_a_slow_launch_makes_one_machine(temporal_client: Client, sim: FakeCloudServer,
                                               worker_process: WorkerProcess, lambda_connection: str,
                                               installation: str, kill_worker: bool,
                                               db_engine: sa.Engine) -> None:
    sim.admin.add_fault("lambda", "create", "latency", when="before", seconds=DELAY_S)
    loop = asyncio.get_running_loop()
    allocation_id, handle = await start(temporal_client, lambda_connection)
    lands_by = loop.time() + DELAY_S + 5  # the simulation acts on the first launch by then, at the latest
    if kill_worker:
        await launch_sent(db_engine, attempt_key(allocation_id, 1))
        # Until the launch request has reached the cloud (it drew the one-shot latency fault), so the
        # worker dies with it in flight rather than before it left.
        await launch_arrived(sim)
        worker_process.kill()  # the answer is lost with the worker; the launch is still in flight
        worker_process.start()

    state = await asyncio.wait_for(settled(handle), 180)

    assert state.phase == Phase.READY, state
    # Count only once the first launch has surely landed: a duplicate appears no earlier.
    await asyncio.sleep(max(0.0, lands_by - loop.time()))
    made = ours(sim, installation, allocation_id)
    assert len(made) == 1, made  # the retry found the slow launch; it did not launch again
    assert state.ref is not None and state.ref.instance_id == made[0]["id"]

    assert (await terminate(temporal_client, allocation_id)).phase == Phase.TERMINATED
    assert all(m["status"] == "terminated" for m in ours(sim, installation, allocation_id))

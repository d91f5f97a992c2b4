"""SIGKILL a REAL worker process (`python worker.py`) after Azure accepted the VM create and before
its answer came back: the restarted worker's retry finds the VM by its name and the allocation ends
with exactly one machine; terminate leaves nothing. (tests/crash runs the same for `local`; it is
not parametrized by cloud, so Azure's variant lives here.)"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState, Timing
from messages.enums import Phase
from messages.ids import allocation_workflow_id, attempt_key
from store.identity import installation_id
from store.secrets import SecretBox
from tests import simclouds
from tests.azure.conftest import CLOUD, Sdk, ours
from tests.crash.conftest import WorkerProcess, worker_env
from tests.eventually import eventually
from tests.workflows.conftest import settled, terminate

TASK_QUEUE = "gpuprov-azure-crash-tests"
TIMING = Timing(heartbeat_timeout_s=2, poll_interval_s=0.2, call_timeout_s=60, boot_timeout_s=60,
                ssh_timeout_s=20, max_retry_interval_s=1)
USER_KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


@pytest.fixture
def worker(temporal_env: WorkflowEnvironment, tmp_path: Path, db_path: Path, secret_key: bytes,
           db_engine: sa.Engine, sim: FakeCloudServer, processes: None) -> Iterator[WorkerProcess]:
    w = WorkerProcess(worker_env(temporal_env, tmp_path, db_path, secret_key, sim, TASK_QUEUE),
                      tmp_path / "worker.log")
    w.start()
    yield w
    w.kill()  # the assertions are done: no need for the worker's 10 s grace period


def vms_of(sim: FakeCloudServer, key: str) -> list[dict[str, object]]:
    """Engine machines of the VM named after `key` (engine names are "<group>/<vm>")."""
    return [m for m in sim.admin.machines() if str(m.get("name", "")).endswith(f"-{key}")]


async def test_kill_after_azure_accepted_the_create(temporal_client: Client, sim: FakeCloudServer,
                                                    worker: WorkerProcess, db_engine: sa.Engine,
                                                    secret_box: SecretBox, sdk: Sdk) -> None:
    with Session(db_engine) as s:
        connection = simclouds.add_connection(s, secret_box, sim, CLOUD)
    # The VM PUT takes effect, then its answer is held back: the worker dies in between.
    sim.admin.add_fault(CLOUD, "create", "latency", when="after", seconds=30)
    allocation_id = f"azc-{uuid.uuid4().hex[:8]}"
    key = attempt_key(allocation_id, 1)
    req = AllocateRequest(allocation_id=allocation_id, connection_id=connection, cloud=CLOUD, region="eastus",
                          gpu="t4", ssh_public_keys=[USER_KEY], timing=TIMING)
    handle = await temporal_client.start_workflow(
        wf.ALLOCATION.name, AllocationInput(request=req), id=allocation_workflow_id(allocation_id),
        task_queue=TASK_QUEUE, result_type=AllocationState)
    await eventually(lambda: len(vms_of(sim, key)) == 1, within=90, what=f"the VM of {key} made")
    worker.kill()
    sim.admin.clear_faults()
    worker.start()

    state = await asyncio.wait_for(settled(handle), 90)
    assert state.phase == Phase.READY
    made = vms_of(sim, key)
    assert len(made) == 1, made  # the retry found the VM by its name; it did not make a second one
    assert state.ref is not None and state.ref.instance_id == made[0]["id"]

    assert (await terminate(temporal_client, allocation_id)).phase == Phase.TERMINATED
    inst = installation_id(db_engine)
    for listing in (sdk.compute.virtual_machines.list_all(), sdk.network.network_interfaces.list_all(),
                    sdk.network.public_ip_addresses.list_all(),
                    sdk.network.network_security_groups.list_all()):
        assert ours(listing, inst) == []

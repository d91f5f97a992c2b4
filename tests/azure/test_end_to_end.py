"""An allocation on the simulated Azure through the real AllocationWorkflow (in-process worker on the
test Temporal server, real activities, the adapter over TLS): zone 1 has no capacity, so the
attempt there fails with the cloud's reason and the next zone lands; the user logs in with OpenSSH as
ubuntu on port 22 with their own key; terminate leaves nothing, as Azure's own SDK shows."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncssh
import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client

from activities.deps import ActivityDeps
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState, Timing
from messages.enums import Phase
from messages.ids import allocation_workflow_id
from store.secrets import SecretBox
from tests import simclouds
from tests.azure.conftest import CLOUD, Sdk, ours
from tests.openssh import openssh
from tests.workflows.conftest import settled
from worker import build_worker

TASK_QUEUE = "gpuprov-azure-tests"
INSTALLATION = "aztest01"
TIMING = Timing(
    heartbeat_timeout_s=5,
    poll_interval_s=0.2,
    call_timeout_s=30,
    boot_timeout_s=60,
    ssh_timeout_s=20,
    k3s_timeout_s=30,
    max_retry_interval_s=1,
)


@pytest.fixture(scope="module")
async def azure_worker(
    temporal_client: Client, db_engine: sa.Engine, secret_box: SecretBox, sim: FakeCloudServer
) -> AsyncIterator[None]:
    deps = ActivityDeps(
        engine=db_engine, box=secret_box, installation_id=INSTALLATION, client=temporal_client
    )
    with simclouds.allowed(deps, sim):
        async with build_worker(temporal_client, deps, task_queue=TASK_QUEUE):
            yield
    await deps.aclose()  # its adapters' CA files (as a worker process does when it exits)


@pytest.fixture
def user_key(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    path = tmp_path / "id_ed25519"
    path.write_bytes(key.export_private_key())
    path.chmod(0o600)
    yield path, key.export_public_key().decode().strip()


async def test_allocation_fails_over_a_full_zone_and_logs_in_with_openssh(
    temporal_client: Client,
    azure_worker: None,
    sim: FakeCloudServer,
    db_engine: sa.Engine,
    secret_box: SecretBox,
    sdk: Sdk,
    user_key: tuple[Path, str],
) -> None:
    sim.admin.set_stock("Standard_NC4as_T4_v3", "eastus-1", 0)
    with Session(db_engine) as s:
        connection = simclouds.add_connection(s, secret_box, sim, CLOUD)
    key_file, public = user_key
    req = AllocateRequest(
        allocation_id=f"az-{uuid.uuid4().hex[:8]}",
        connection_id=connection,
        cloud=CLOUD,
        region="eastus",
        gpu="t4",
        ssh_public_keys=[public],
        k3s=True,
        timing=TIMING,
    )
    handle = await temporal_client.start_workflow(
        wf.ALLOCATION.name,
        AllocationInput(request=req),
        id=allocation_workflow_id(req.allocation_id),
        task_queue=TASK_QUEUE,
        result_type=AllocationState,
    )
    st = await settled(handle, within=90)

    assert st.phase == Phase.READY, st.error
    first, last = st.attempts[0], st.attempts[-1]
    assert (first.offer.zone, first.outcome) == ("1", "capacity")
    assert "ZonalAllocationFailed" in (first.reason or "") and "azure/eastus/1" in (first.reason or "")
    assert (last.offer.zone, last.outcome) == ("2", "created") and st.offer == last.offer
    assert (
        st.host is not None and st.host.startswith("127.") and st.ssh_port == 22 and st.ssh_user == "ubuntu"
    )
    assert len(st.gpus) == 1 and "T4" in st.gpus[0].name
    assert not any("k3s" in n for n in st.notes)  # installed at boot / checked, not skipped

    login = await asyncio.to_thread(openssh, key_file, st.host, "echo logged in as $USER")
    assert login.returncode == 0, login.stderr
    assert login.stdout.strip() == "logged in as ubuntu"

    handle_t = temporal_client.get_workflow_handle(allocation_workflow_id(req.allocation_id))
    done = await handle_t.execute_update(wf.ALLOCATION.terminate.name, result_type=AllocationState)
    assert done.phase == Phase.TERMINATED
    for listing in (
        sdk.compute.virtual_machines.list_all(),
        sdk.network.network_interfaces.list_all(),
        sdk.network.public_ip_addresses.list_all(),
        sdk.network.network_security_groups.list_all(),
    ):
        assert ours(listing, INSTALLATION) == []
    failed_attempt = await asyncio.to_thread(openssh, key_file, st.host, "true")
    assert failed_attempt.returncode != 0  # the machine is gone

"""An allocation on the simulated Compute Engine through the real AllocationWorkflow: the official SDK
adapter, a machine on its own loopback address, OpenSSH logging in as ubuntu on port 22 with the
user's key, then terminate leaving no instance and no firewall rule, as the SDK shows; and capacity in
one zone failing over to the next zone, with the reason in the attempts."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import sqlalchemy as sa
from google.cloud import compute_v1
from sqlmodel import Session
from temporalio.client import Client, WorkflowHandle

from fakeclouds.gcp_auth import PROJECT
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState
from messages.enums import Phase
from messages.ids import allocation_workflow_id
from providers.gcp import instance_name
from store.secrets import SecretBox
from tests import simclouds
from tests.gcp.conftest import INSTALLATION, TASK_QUEUE
from tests.openssh import openssh
from tests.workflows.conftest import FAST, settled, terminate

USER_KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


def make_request(connection_id: str, **kw: Any) -> AllocateRequest:
    fields: dict[str, Any] = dict(
        allocation_id=f"gcp-{uuid.uuid4().hex[:8]}",
        connection_id=connection_id,
        cloud="gcp",
        region="us-central1",
        ssh_public_keys=[USER_KEY],
        k3s=False,
        timing=FAST,
    )
    return AllocateRequest(**{**fields, **kw})


async def start_allocate(client: Client, req: AllocateRequest) -> WorkflowHandle[Any, AllocationState]:
    return await client.start_workflow(
        wf.ALLOCATION.name,
        AllocationInput(request=req),
        id=allocation_workflow_id(req.allocation_id),
        task_queue=TASK_QUEUE,
        result_type=AllocationState,
    )


@pytest.fixture
def gcp_connection(sim_clean: FakeCloudServer, db_engine: sa.Engine, secret_box: SecretBox) -> str:
    with Session(db_engine) as s:
        return simclouds.add_connection(s, secret_box, sim_clean, "gcp")


@pytest.fixture(scope="module")
def user_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    path = tmp_path_factory.mktemp("gcp-user") / "id_ed25519"
    path.write_bytes(key.export_private_key())
    path.chmod(0o600)
    return path, key.export_public_key().decode().strip()


def ours_in_the_cloud(sdk: Callable[[str], Any], key: str) -> tuple[list[str], list[str]]:
    """(instances, firewall rules) the official SDK shows for an attempt key."""
    request = compute_v1.AggregatedListInstancesRequest(
        project=PROJECT, filter=f'labels.gpuprov-key = "{key}"'
    )
    instances = [
        i.name
        for _, scoped in sdk("InstancesClient").aggregated_list(request=request)
        for i in scoped.instances
    ]
    firewalls = sdk("FirewallsClient").list(request=compute_v1.ListFirewallsRequest(project=PROJECT))
    return instances, [f.name for f in firewalls if f.name == instance_name(INSTALLATION, key)]


async def test_allocate_then_terminate_on_simulated_compute_engine(
    temporal_client: Any,
    gcp_worker: None,
    sim_clean: FakeCloudServer,
    gcp_connection: str,
    sdk: Callable[[str], Any],
    user_key: tuple[Path, str],
) -> None:
    private, public = user_key
    req = make_request(
        gcp_connection,
        gpu="l4",
        ports=[8080],
        k3s=True,
        ssh_public_keys=[public],
    )
    st = await settled(await start_allocate(temporal_client, req))

    assert st.phase == Phase.READY and st.host is not None and st.host.startswith("127.")
    assert (st.ssh_port, st.ssh_user) == (22, "ubuntu")
    assert st.offer is not None and st.offer.zone and st.offer.gpu is not None and st.offer.gpu.name == "L4"
    assert len(st.gpus) == st.offer.gpu.count and "L4" in st.gpus[0].name
    assert not any("k3s" in n for n in st.notes)  # installed and checked over SSH (the image ships k3s)
    # k3s at boot (the capability is cloud-init): the instance's user data carries the k3s part.
    [machine] = [m for m in sim_clean.admin.live_machines() if m["address"] == st.host]
    assert "get.k3s.io" in (machine["user_data"] or "")
    key = st.attempts[-1].key
    assert ours_in_the_cloud(sdk, key) == (
        [instance_name(INSTALLATION, key)],
        [instance_name(INSTALLATION, key)],
    )

    # The real OpenSSH client, port 22, the user's own key; the machine takes only user ubuntu.
    # (Commands run as the simulation's own OS user: it is a simulation, not isolation.)
    if shutil.which("ssh"):
        done = await asyncio.to_thread(openssh, private, st.host, "nvidia-smi -L")
        assert done.returncode == 0, done.stderr
        assert "L4" in done.stdout
    async with asyncssh.connect(
        st.host, 22, username="ubuntu", client_keys=[str(private)], known_hosts=None
    ) as conn:
        assert "L4" in (await conn.run("nvidia-smi -L", check=True)).stdout
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect(st.host, 22, username="root", client_keys=[str(private)], known_hosts=None)

    await terminate(temporal_client, req.allocation_id)
    assert ours_in_the_cloud(sdk, key) == ([], [])
    async with simclouds.provider(sim_clean, "gcp", installation_id=INSTALLATION) as p:
        assert await p.list_owned() == []


async def test_capacity_in_one_zone_fails_over_to_the_next_zone(
    temporal_client: Any,
    gcp_worker: None,
    sim_clean: FakeCloudServer,
    gcp_connection: str,
    sdk: Callable[[str], Any],
) -> None:
    shape = "n1-standard-4+nvidia-tesla-t4:1"  # the cheapest T4, same price in every zone of the region
    full = ["us-central1-a", "us-central1-b", "us-central1-c"]
    for zone in full:
        sim_clean.admin.set_stock(shape, zone, 0)
    req = make_request(gcp_connection, gpu="t4")
    st = await settled(await start_allocate(temporal_client, req))

    assert st.phase == Phase.READY
    *refused, last = st.attempts
    assert sorted(a.offer.zone or "" for a in refused) == full  # each full zone tried once, then the next
    for a in refused:
        assert (a.offer.instance_type, a.outcome) == (shape, "capacity")
        assert a.reason and "ZONE_RESOURCE_POOL_EXHAUSTED" in a.reason and str(a.offer.zone) in a.reason
    assert (last.offer.instance_type, last.offer.zone, last.outcome) == (shape, "us-central1-f", "created")
    first = refused[0]
    # The failed attempt left nothing: its firewall rule was released with it.
    assert ours_in_the_cloud(sdk, first.key) == ([], [])

    await terminate(temporal_client, req.allocation_id)
    assert ours_in_the_cloud(sdk, last.key) == ([], [])

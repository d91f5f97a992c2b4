"""Sweep tests: an in-process worker on its own task queue, its own database and installation id,
and the simulated clouds (local, lambda) with real SSH machines.

The sweep lists every connection of its database, so this one starts empty for each test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import asyncssh
import pytest
import sqlalchemy as sa
from sqlmodel import Session, delete, select
from temporalio.client import Client

from activities.deps import ActivityDeps
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.ids import attempt_key
from messages.sweep import SweepInput, SweepSummary
from providers.base import CloudProvider, InstanceRef, LaunchSpec, OfferQuery, Ownership
from providers.lambda_ import instance_name
from store import migrate
from store.db import make_engine
from store.models import Attempt, Connection, Instance, InstanceEvent, SweepAction, SweepSighting
from store.secrets import SecretBox
from tests import recorded, simclouds
from worker import build_worker

TASK_QUEUE = "gpuprov-sweep-tests"
PUBLIC_KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
INSTALLATION = "sweep001"


@pytest.fixture(scope="session")
def sweep_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sa.Engine]:
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('sweep') / 'gpuprov.db'}")
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def sweep_deps(sweep_engine: sa.Engine, secret_box: SecretBox, temporal_client: Client) -> ActivityDeps:
    return ActivityDeps(engine=sweep_engine, box=secret_box, installation_id=INSTALLATION,
                        client=temporal_client)


@pytest.fixture(scope="session")
async def sweep_worker(temporal_client: Client, sweep_deps: ActivityDeps) -> AsyncIterator[None]:
    async with build_worker(temporal_client, sweep_deps, task_queue=TASK_QUEUE):
        yield


@pytest.fixture(scope="session")
async def sim_server(sweep_deps: ActivityDeps) -> AsyncIterator[FakeCloudServer]:
    async with FakeCloudServer(boot_delay=0.3, terminate_delay=0.05) as server:
        with simclouds.allowed(sweep_deps, server):
            yield server


@pytest.fixture
async def sim(sim_server: FakeCloudServer, sweep_engine: sa.Engine) -> FakeCloudServer:
    """A fresh simulated cloud and an empty database."""
    await sim_server.admin.aio.reset()
    with Session(sweep_engine) as s:
        for table in (SweepAction, SweepSighting, InstanceEvent, Attempt, Instance, Connection):
            s.exec(delete(table))  # type: ignore[call-overload]
        s.commit()
    return sim_server


@pytest.fixture
def connect(sim: FakeCloudServer, sweep_engine: sa.Engine, secret_box: SecretBox) -> Callable[[str], str]:
    """A connection to the simulated `cloud` (two calls: two connections to one account)."""
    def add(cloud: str) -> str:
        with Session(sweep_engine) as s:
            return simclouds.add_connection(s, secret_box, sim, cloud)
    return add


def provider(sim: FakeCloudServer, cloud: str, installation_id: str = INSTALLATION) -> CloudProvider:
    return simclouds.provider(sim, cloud, installation_id=installation_id)


def new_allocation_id() -> str:
    return f"zz{uuid.uuid4().hex[:8]}"


async def plant(sim: FakeCloudServer, cloud: str, allocation_id: str | None = None, seq: int = 1, *,
                installation_id: str = INSTALLATION, ports: list[int] | None = None) -> InstanceRef:
    """A machine made the way an allocation's create makes it (key, ownership tag), no workflow.
    With `ports`, on Lambda: its own firewall ruleset too (a side resource)."""
    allocation_id = allocation_id or new_allocation_id()
    key = attempt_key(allocation_id, seq)
    async with provider(sim, cloud, installation_id) as p:
        offer = (await p.offers(OfferQuery(spot=False)))[0]
        return await p.create(offer, LaunchSpec(
            key=key, owner=Ownership(installation_id=installation_id, allocation_id=allocation_id),
            ssh_public_keys=[PUBLIC_KEY], ports=ports or []))


def add_instance(engine: sa.Engine, allocation_id: str, *, connection_id: str, cloud: str, status: str,
                 key: str | None = None, cloud_instance_id: str | None = None) -> None:
    """The allocation's row, as the workflow records it."""
    with Session(engine) as s:
        s.add(Instance(id=allocation_id, provider=cloud, connection_id=connection_id,
                       workflow_id=f"allocation-{allocation_id}", status=status, phase=status, key=key,
                       cloud_instance_id=cloud_instance_id))
        s.commit()


async def alive(sim: FakeCloudServer, instance_id: str) -> bool:
    m = await sim.admin.aio.machine(instance_id)
    return bool(m["status"] not in ("terminated", "terminating"))


async def sweep(client: Client, *, keep: bool = False, **kw: Any) -> SweepSummary:
    """One sweep run by hand (what the Schedule starts), with test timing. `keep`: its history
    replayed, and kept when recording (tests/recorded.py)."""
    fields: dict[str, Any] = dict(poll_interval_s=0.1, heartbeat_timeout_s=5, list_timeout_s=30,
                                  terminate_timeout_s=60, max_retry_interval_s=1)
    fields.update(kw)
    workflow_id = f"sweep-test-{uuid.uuid4().hex[:8]}"
    summary: SweepSummary = await client.execute_workflow(
        wf.SWEEP.name, SweepInput(**fields), id=workflow_id, task_queue=TASK_QUEUE,
        result_type=SweepSummary)
    if keep:
        await recorded.replays(client, workflow_id)
    return summary


def actions(engine: sa.Engine) -> list[SweepAction]:
    with Session(engine) as s:
        return list(s.exec(select(SweepAction)).all())


async def launch_twin(sim: FakeCloudServer, ref: InstanceRef) -> str:
    """A second Lambda instance under `ref`'s name (Lambda does not enforce unique names): what two
    creates racing past the lookup leave. Returns its id."""
    async with provider(sim, "lambda") as p:
        status = await p.get(ref)
        assert status is not None and status.instance_type
        name = instance_name(INSTALLATION, ref.key)
        data = await p._data("POST", "/instance-operations/launch", json={  # type: ignore[attr-defined]
            "region_name": ref.region, "instance_type_name": status.instance_type,
            "ssh_key_names": (await sim.admin.aio.machine(ref.instance_id))["extra"]["ssh_key_names"],
            "quantity": 1, "name": name})
        return str(data["instance_ids"][0])


async def side_objects(sim: FakeCloudServer, key: str) -> list[dict[str, Any]]:
    """Lambda side resources (firewall rulesets; SSH key objects as launches made them before
    2026-12) named for `key`."""
    return [r for r in await sim.admin.aio.side_resources()
            if r["facade"] == "lambda" and r["name"] == instance_name(INSTALLATION, key)]

"""An allocation's snapshot record (activities/records.record_allocation) on SQLite and PostgreSQL:
the row as the snapshot has it, an event only when (status, phase) moved, `ready_at` and
`terminated_at` written once, and a retried record changing nothing."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlmodel import Session, col, select
from temporalio.testing import ActivityEnvironment

from activities.deps import ActivityDeps
from activities.records import record_allocation
from messages.activities import RecordAllocationInput
from messages.allocation import AllocateRequest, AllocationState, AttemptRecord, CloudTarget, GpuInfo
from messages.enums import AllocationStatus, AttemptOutcome, Phase
from providers.base import InstanceRef, Offer
from store import allocations
from store.models import Attempt, Instance, InstanceEvent
from store.secrets import SecretBox

OFFER = Offer(provider="lambda", instance_type="gpu_1x_a10", vcpus=30, memory_gib=200, region="us-east-1",
              price_per_hour=0.75, connection_id="c2")
GPU = GpuInfo(index=0, name="NVIDIA A10", memory_mib=24564)


def snapshot(status: AllocationStatus, phase: Phase) -> RecordAllocationInput:
    ready = status == AllocationStatus.READY
    state = AllocationState(
        allocation_id="a1", phase=phase, offer=OFFER, target=CloudTarget(connection_id="c2", cloud="lambda"),
        attempts=[AttemptRecord(seq=1, offer=OFFER, key="k-a1", outcome=AttemptOutcome.CREATED)],
        ref=InstanceRef(provider="lambda", instance_id="i-1", key="k-a1"), notes=["skipped aws: no A10"],
        host="203.0.113.7" if ready else None, ssh_port=22 if ready else None,
        ssh_user="ubuntu" if ready else None, gpus=[GPU] if ready else [])
    request = AllocateRequest(allocation_id="a1", connection_id="c1", cloud="aws", project="vision",
                              name="trainer", gpu="A10", ssh_public_keys=["ssh-ed25519 AAAA fake"])
    return RecordAllocationInput(request=request, state=state, status=status)


def deps(engine: sa.Engine) -> ActivityDeps:
    return ActivityDeps(engine=engine, box=SecretBox(Fernet.generate_key()), installation_id="test0001")


def events(engine: sa.Engine) -> list[tuple[str, str]]:
    with Session(engine) as s:
        rows = s.exec(select(InstanceEvent).where(InstanceEvent.instance_id == "a1")
                      .order_by(col(InstanceEvent.id))).all()
        return [(e.status, e.phase) for e in rows]


def row(engine: sa.Engine) -> Instance:
    with Session(engine) as s:
        found = s.get(Instance, "a1")
        assert found is not None
        return found


def test_a_snapshot_writes_the_row_and_a_retried_one_changes_nothing(migrated: sa.Engine) -> None:
    with Session(migrated, expire_on_commit=False) as s:  # as the API inserts it
        s.add(Instance(id="a1", provider="aws", connection_id="c1", workflow_id="allocation-a1",
                       project="vision"))
        s.commit()
    d = deps(migrated)
    record_allocation(d, snapshot(AllocationStatus.PROVISIONING, Phase.WAIT_RUNNING))
    record_allocation(d, snapshot(AllocationStatus.READY, Phase.READY))

    ready = row(migrated)
    assert (ready.status, ready.phase, ready.ssh_host, ready.ssh_port, ready.ssh_user) == (
        "ready", "ready", "203.0.113.7", 22, "ubuntu")
    # Where the attempt runs (planning crossed clouds), what it runs, what the request asked.
    assert (ready.provider, ready.connection_id, ready.instance_type, ready.offer_region) == (
        "lambda", "c2", "gpu_1x_a10", "us-east-1")
    assert (ready.key, ready.cloud_instance_id, ready.price_per_hour) == ("k-a1", "i-1", 0.75)
    assert (ready.name, ready.project, ready.gpu, ready.note) == (
        "trainer", "vision", "A10", "skipped aws: no A10")
    assert ready.gpus_found == [GPU.model_dump()]
    assert isinstance(ready.ready_at, datetime)
    assert events(migrated) == [("provisioning", "wait_running"), ("ready", "ready")]

    record_allocation(d, snapshot(AllocationStatus.READY, Phase.READY))  # retried: the same snapshot
    again = row(migrated)
    assert again.ready_at == ready.ready_at  # written once: time-to-ready is counted once
    assert events(migrated) == [("provisioning", "wait_running"), ("ready", "ready")]
    with Session(migrated) as s:
        assert [a.seq for a in s.exec(select(Attempt).where(Attempt.instance_id == "a1")).all()] == [1]

    record_allocation(d, snapshot(AllocationStatus.TERMINATED, Phase.TERMINATED))
    gone = row(migrated)
    assert gone.terminated_at is not None and gone.ready_at == ready.ready_at
    assert gone.gpus_found == ready.gpus_found  # what the machine had, kept after it is gone
    record_allocation(d, snapshot(AllocationStatus.TERMINATED, Phase.TERMINATED))
    assert row(migrated).terminated_at == gone.terminated_at
    assert events(migrated)[-1] == ("terminated", "terminated") and len(events(migrated)) == 3


def test_a_snapshot_of_an_allocation_the_api_never_recorded_writes_its_row(migrated: sa.Engine) -> None:
    env = ActivityEnvironment()
    env.run(record_allocation, deps(migrated), snapshot(AllocationStatus.PROVISIONING, Phase.WAIT_RUNNING))
    made = row(migrated)
    assert made.workflow_id == env.info.workflow_id  # the workflow that recorded it
    assert (made.provider, made.connection_id, made.project, made.status) == (
        "lambda", "c2", "vision", "provisioning")
    assert events(migrated) == [("provisioning", "wait_running")]


def test_a_row_the_workflow_wrote_first_carries_the_requests_lease(migrated: sa.Engine) -> None:
    """The workflow's first record won the race with the API's insert (which then found the row
    and left it): the row still holds the lease the request asked for — the create reads it there
    to arm the machine's dead-man switch (activities/cloud.py `_lease_at_boot`); it was lost
    (`make test` from a fresh clone: tests/jobs/test_lease_e2e.py saw `lease_hours` None)."""
    first = snapshot(AllocationStatus.PROVISIONING, Phase.VALIDATE)
    first = first.model_copy(update={"request": first.request.model_copy(update={"lease_hours": 8.0})})
    ActivityEnvironment().run(record_allocation, deps(migrated), first)
    assert allocations.record_started(migrated, first.request, "allocation-a1") == "provisioning"
    assert row(migrated).lease_hours == 8.0


def test_a_snapshot_meeting_the_apis_insert_completes_that_row(migrated: sa.Engine) -> None:
    """The API inserts the started allocation's row right after the start (store/allocations.py);
    the workflow's first record may have read no row just before. Its write then finds the row
    there and completes it: the activity does not fail (it did, on the duplicate key, before)."""
    first = snapshot(AllocationStatus.PROVISIONING, Phase.WAIT_RUNNING)
    request = first.request
    api_first: list[str] = []
    inserts = 0

    def api_inserts_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        nonlocal inserts
        if statement.lstrip().upper().startswith("INSERT INTO INSTANCE "):
            inserts += 1
            if inserts == 1:  # the workflow's: the API's own insert (on another connection) lands first
                api_first.append(allocations.record_started(migrated, request, "allocation-a1"))

    sa.event.listen(migrated, "before_cursor_execute", api_inserts_first)
    try:
        env = ActivityEnvironment()
        env.run(record_allocation, deps(migrated), first)
    finally:
        sa.event.remove(migrated, "before_cursor_execute", api_inserts_first)
    assert api_first == ["provisioning"]  # the API's row was there before the workflow's insert
    made = row(migrated)
    assert env.info.workflow_id != "allocation-a1"  # so the row below is the API's, completed
    assert (made.workflow_id, made.provider, made.connection_id, made.status, made.phase) == (
        "allocation-a1", "lambda", "c2", "provisioning", "wait_running")
    assert made.instance_type == "gpu_1x_a10" and made.name == "trainer"

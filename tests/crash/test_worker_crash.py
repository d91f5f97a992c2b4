"""SIGKILL the worker at the two worst moments of an allocation and restart it: the
allocation still completes with exactly one machine, and terminate leaves nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import asyncssh
from temporalio.client import Client

from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState, Timing
from messages.enums import Phase
from messages.ids import allocation_workflow_id, attempt_key
from tests import simclouds
from tests.crash.conftest import TASK_QUEUE, WorkerProcess, machines_of
from tests.eventually import eventually
from tests.workflows.conftest import settled, terminate

# A 2 s heartbeat timeout: the server notices the dead worker's activity within seconds.
TIMING = Timing(heartbeat_timeout_s=2, poll_interval_s=0.2, call_timeout_s=60, boot_timeout_s=60,
                ssh_timeout_s=20, max_retry_interval_s=1)
USER_KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


async def until(predicate: Callable[[], bool], what: str = "the moment to kill the worker") -> None:
    """Until `predicate()` (the moment a crash test kills the worker): tests/eventually.py, 30 s."""
    await eventually(predicate, within=90, what=what)


async def allocate_with_a_crash(
        client: Client, sim: FakeCloudServer, worker: WorkerProcess, conn: str,
        crash_when: Callable[[str], bool],
        restarted: Callable[[str], None] = lambda key: None) -> tuple[str, AllocationState]:
    """An allocation on the local cloud whose worker is killed once `crash_when(key)` holds and started
    again (then `restarted(key)` runs): it ends ready, on one machine."""
    allocation_id = f"crash-{uuid.uuid4().hex[:8]}"
    key = attempt_key(allocation_id, 1)
    req = AllocateRequest(allocation_id=allocation_id, connection_id=conn, cloud="local",
                          ssh_public_keys=[USER_KEY], timing=TIMING)
    handle = await client.start_workflow(wf.ALLOCATION.name, AllocationInput(request=req),
                                         id=allocation_workflow_id(allocation_id), task_queue=TASK_QUEUE,
                                         result_type=AllocationState)
    await until(lambda: crash_when(key), f"the moment to kill the worker ({key})")
    worker.kill()
    sim.admin.clear_faults()
    worker.start()
    restarted(key)
    state = await asyncio.wait_for(settled(handle), 90)
    assert state.phase == Phase.READY
    made = machines_of(sim, key)
    assert len(made) == 1, made  # the retry found the machine; it did not make a second one
    assert made[0]["status"] == "running" and state.ref is not None and state.ref.instance_id == made[0]["id"]
    return allocation_id, state


async def terminate_and_check_nothing_left(client: Client, sim: FakeCloudServer, allocation_id: str,
                                           installation: str) -> None:
    state = await terminate(client, allocation_id)
    assert state.phase == Phase.TERMINATED
    assert all(m["status"] == "terminated" for m in sim.admin.machines())
    async with simclouds.provider(sim, "local", installation_id=installation) as p:
        assert await p.list_owned() == []


async def test_kill_after_the_cloud_accepted_the_create(temporal_client: Client, sim: FakeCloudServer,
                                                        worker_process: WorkerProcess,
                                                        local_connection: str, installation: str) -> None:
    # The create takes effect, then its response is held back: the worker dies in between.
    sim.admin.add_fault("local", "create", "latency", when="after", seconds=30)

    def created(key: str) -> bool:
        return len(machines_of(sim, key)) == 1

    allocation_id, _ = await allocate_with_a_crash(temporal_client, sim, worker_process, local_connection,
                                                   created)
    await terminate_and_check_nothing_left(temporal_client, sim, allocation_id, installation)


async def test_kill_while_waiting_for_boot(temporal_client: Client, sim: FakeCloudServer,
                                           worker_process: WorkerProcess, local_connection: str,
                                           installation: str) -> None:
    # Held booting until the worker is dead (a 5 s boot could end before the test looked on a busy
    # box), then let up for the restarted worker to find.
    sim.admin.configure(hold_boots=True)
    try:
        def booting(key: str) -> bool:
            made = machines_of(sim, key)
            return len(made) == 1 and made[0]["status"] == "pending"

        def boot_now(key: str) -> None:
            (machine,) = machines_of(sim, key)
            sim.admin.boot_now(machine["id"])

        allocation_id, _ = await allocate_with_a_crash(temporal_client, sim, worker_process,
                                                       local_connection, booting, boot_now)
    finally:
        sim.admin.configure(hold_boots=False)
    await terminate_and_check_nothing_left(temporal_client, sim, allocation_id, installation)

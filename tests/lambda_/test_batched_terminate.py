"""Lambda terminates asked at once go in one call ("Terminates one or more instances"), counted at the
simulation; a call refused for one id (the simulation answers 404 for all when one is unknown) is
made again for each id alone, so the others' teardowns go on."""

from __future__ import annotations

import asyncio

from fakeclouds.server import FakeCloudServer
from providers.base import InstanceRef
from providers.lambda_ import LambdaProvider
from tests.lambda_.conftest import offer, spec

TERMINATE = "POST /instance-operations/terminate"


async def machines(sim: FakeCloudServer, p: LambdaProvider, n: int) -> list[InstanceRef]:
    sim.admin.set_stock("gpu_1x_a10", "us-east-1", n)
    where = await offer(p)
    return [await p.create(where, spec(p)) for _ in range(n)]


def status(sim: FakeCloudServer, ref: InstanceRef) -> str:
    return str(sim.admin.machine(ref.instance_id)["status"])


async def test_terminates_at_once_go_in_one_call(sim: FakeCloudServer, p: LambdaProvider) -> None:
    refs = await machines(sim, p, 5)
    sim.admin.clear_calls()
    await asyncio.gather(*(p.terminate(r) for r in refs))
    # The first may go alone, the rest ask while it is under way: at most two calls, never five.
    assert sim.admin.call_counts()["lambda"][TERMINATE] <= 2
    assert {status(sim, r) for r in refs} <= {"terminating", "terminated"}


async def test_a_call_refused_for_one_id_is_made_for_each_alone(sim: FakeCloudServer,
                                                               p: LambdaProvider) -> None:
    refs = await machines(sim, p, 2)
    unknown = refs[0].model_copy(update={"instance_id": "0" * 32})  # gone (or never was)
    sim.admin.clear_calls()
    await asyncio.gather(*(p.terminate(r) for r in [unknown, *refs]))  # no error: gone is success
    # All three asked before the call was made (its runner is a task started after them): the call
    # of three, refused, then one each.
    assert sim.admin.call_counts()["lambda"][TERMINATE] == 4
    assert {status(sim, r) for r in refs} <= {"terminating", "terminated"}

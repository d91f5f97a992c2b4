"""Lambda terminates asked at once go in one call ("Terminates one or more instances"), counted at the
simulation; a call refused for one id (the simulation answers 404 for all when one is unknown) is
made again for each id alone, so the others' teardowns go on."""

from __future__ import annotations

import asyncio
import json

import httpx

from fakeclouds.server import FakeCloudServer
from providers.base import InstanceRef, InvalidRequest
from providers.lambda_ import LambdaProvider
from tests.lambda_.conftest import offer, spec
from tests.lambda_.test_adapter import error, mocked

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


async def test_one_ids_refusal_fails_its_own_teardown_only() -> None:
    """Mock transport: the call of three is refused (404, one unknown id); alone, "bad" is refused as
    invalid, "gone" is unknown (gone: success), "ok" is terminated."""
    bodies: list[list[str]] = []

    def handler(req: httpx.Request) -> httpx.Response:
        ids = json.loads(req.content)["instance_ids"]
        bodies.append(ids)
        if len(ids) > 1 or ids == ["gone"]:
            return error(404, "global/object-does-not-exist")
        if ids == ["bad"]:
            return error(400, "global/invalid-parameters")
        return httpx.Response(200, json={"data": {"terminated_instances": []}})

    refs = [InstanceRef(provider="lambda", instance_id=i, key=f"gp-{i}-a1") for i in ("bad", "gone", "ok")]
    async with mocked(handler) as p:
        p._named = _no_twins  # type: ignore[method-assign]  # a gone machine's ruleset: no twin, none
        p._delete_rulesets = _no_rulesets  # type: ignore[method-assign]
        outcomes = await asyncio.gather(*(p.terminate(r) for r in refs), return_exceptions=True)
    assert isinstance(outcomes[0], InvalidRequest) and outcomes[1:] == [None, None], outcomes
    assert bodies == [["bad", "gone", "ok"], ["bad"], ["gone"], ["ok"]]


async def _no_twins(name: str) -> list[dict[str, object]]:
    return []


async def _no_rulesets(name: str, *, strict: bool) -> None:
    return None

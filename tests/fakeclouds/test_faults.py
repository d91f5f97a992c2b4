from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from fakeclouds.admin import FakeCloudAdmin, FakeCloudAdminError
from fakeclouds.engine import HELD_S
from fakeclouds.faults import FaultBook, FaultRule
from tests.fakeclouds.helpers import create_local, launch_lambda, wait_lambda, wait_local


async def test_capacity_fault_per_region(local: httpx.AsyncClient, admin: FakeCloudAdmin,
                                         pubkey: str) -> None:
    admin.add_fault("local", "create", "capacity", region="local-1")
    r = await create_local(local, pubkey, name="a", region="local-2")
    assert r.status_code == 201  # other region: not hit, rule not used up
    r = await create_local(local, pubkey, name="b", region="local-1")
    assert r.status_code == 503 and r.json()["error"]["code"] == "insufficient_capacity"
    assert (await create_local(local, pubkey, name="b", region="local-1")).status_code == 201  # times=1
    assert admin.faults() == []


async def test_lambda_capacity_and_quota(lam: httpx.AsyncClient, admin: FakeCloudAdmin, pubkey: str) -> None:
    await admin.aio.add_fault("lambda", "create", "capacity")
    await admin.aio.add_fault("lambda", "create", "quota")
    r = await launch_lambda(lam, pubkey)
    assert r.json()["error"]["code"] == "instance-operations/launch/insufficient-capacity"
    r = await launch_lambda(lam, pubkey)
    assert r.status_code == 400 and r.json()["error"]["code"] == "global/quota-exceeded"
    assert (await launch_lambda(lam, pubkey)).status_code == 200
    assert len(await admin.aio.live_machines()) == 1  # the refused launches made nothing


async def test_rate_limit_has_retry_after(local: httpx.AsyncClient, lam: httpx.AsyncClient,
                                          admin: FakeCloudAdmin) -> None:
    admin.add_fault("*", "list", "rate_limit", times=2, retry_after=0.5)
    r = await local.get("/machines")
    assert r.status_code == 429 and r.headers["retry-after"] == "0.5"
    assert r.json()["error"]["code"] == "rate_limited"
    r = await lam.get("/instances")
    assert r.status_code == 429 and r.headers["retry-after"] == "0.5"
    assert (await local.get("/machines")).status_code == 200


async def test_server_error_and_times_forever(local: httpx.AsyncClient, admin: FakeCloudAdmin) -> None:
    admin.add_fault("local", "offers", "server_error", times=-1, status=503)
    for _ in range(3):
        assert (await local.get("/offers")).status_code == 503
    assert (await local.get("/account")).status_code == 200  # other op
    admin.clear_faults()
    assert (await local.get("/offers")).status_code == 200


async def test_facade_filter(local: httpx.AsyncClient, admin: FakeCloudAdmin) -> None:
    admin.add_fault("lambda", "*", "server_error")
    assert (await local.get("/offers")).status_code == 200
    assert len(admin.faults()) == 1


async def test_create_only_kinds_ignore_other_ops(local: httpx.AsyncClient, admin: FakeCloudAdmin,
                                                  pubkey: str) -> None:
    admin.add_fault("local", "*", "capacity")
    assert (await local.get("/machines")).status_code == 200
    assert (await create_local(local, pubkey)).status_code == 503


async def test_latency_before(local: httpx.AsyncClient, admin: FakeCloudAdmin) -> None:
    admin.add_fault("local", "get", "latency", seconds=0.3)
    start = time.monotonic()
    assert (await local.get("/machines/nope")).status_code == 404
    assert time.monotonic() - start >= 0.3


async def test_latency_after_create_took_effect(local: httpx.AsyncClient, admin: FakeCloudAdmin,
                                                pubkey: str) -> None:
    """The caller gives up (a killed worker) while the cloud has already made the machine. The
    caller's 2 s leave a busy host's create time to take effect; the answer's 30 s outlast them."""
    admin.add_fault("local", "create", "latency", seconds=30.0, when="after")
    with pytest.raises(httpx.ReadTimeout):
        await local.post("/machines", timeout=2.0, json={
            "name": "ghost", "instance_type": "cpu-small", "region": "local-1", "ssh_public_keys": [pubkey]})
    (m,) = (await local.get("/machines", params={"name": "ghost"})).json()["machines"]
    assert m["name"] == "ghost"


async def test_lose_response(local: httpx.AsyncClient, lam: httpx.AsyncClient, admin: FakeCloudAdmin,
                             pubkey: str) -> None:
    admin.add_fault("*", "create", "lose_response", times=2)
    r = await create_local(local, pubkey, name="lost")
    assert r.status_code == 504
    assert [m["name"] for m in (await local.get("/machines")).json()["machines"]] == ["lost"]
    r = await launch_lambda(lam, pubkey, name="lost")
    assert r.status_code == 504
    assert [i["name"] for i in (await lam.get("/instances")).json()["data"]] == ["lost"]


async def test_stuck_booting(local: httpx.AsyncClient, admin: FakeCloudAdmin, pubkey: str) -> None:
    admin.add_fault("local", "create", "stuck_booting")
    m = (await create_local(local, pubkey)).json()
    await asyncio.sleep(0.4)  # boot delay is 0.1
    again = (await local.get(f"/machines/{m['id']}")).json()
    assert again["status"] == "pending" and again["ssh_port"] is None
    assert admin.machine(m["id"])["booted_at"] is None
    assert (await local.delete(f"/machines/{m['id']}")).status_code == 202


async def test_die_after_boot(lam: httpx.AsyncClient, admin: FakeCloudAdmin, pubkey: str) -> None:
    """The machine boots, then dies. Whether it booted is read from its record (`booted_at`), not by
    polling for its short "active" spell, which a busy host's poll can miss (CI did)."""
    admin.add_fault("lambda", "create", "die_after_boot", seconds=0.2)
    (iid,) = (await launch_lambda(lam, pubkey)).json()["data"]["instance_ids"]
    await wait_lambda(lam, iid, "unhealthy")
    died = admin.machine(iid)
    assert died["detail"] == "died after boot (injected)"
    assert died["booted_at"] is not None and died["booted_at"] >= died["created_at"]


async def test_a_termination_under_way_waits_out_the_delay_as_it_is_now(
        local: httpx.AsyncClient, admin: FakeCloudAdmin, pubkey: str) -> None:
    """A lengthened terminate_delay holds a machine terminating however slow the host (what a crash
    test kills a worker during); shortened, the termination already under way ends."""
    m = (await create_local(local, pubkey)).json()
    await wait_local(local, m["id"])
    admin.configure(terminate_delay=HELD_S)
    assert (await local.delete(f"/machines/{m['id']}")).status_code == 202
    await asyncio.sleep(0.2)  # ten times the delay it was created under
    assert admin.machine(m["id"])["status"] == "terminating"
    admin.configure(terminate_delay=0.02)
    gone = await admin.aio.wait_status(m["id"], "terminated", timeout=30)
    assert gone["ended_at"] is not None


async def test_a_notice_ends_in_the_reclaim_by_itself(lam: httpx.AsyncClient, admin: FakeCloudAdmin,
                                                      pubkey: str) -> None:
    """The notice's own timer takes the machine back (the preemption tests end theirs by hand, so a
    busy host's reads fit in the notice)."""
    (iid,) = (await launch_lambda(lam, pubkey)).json()["data"]["instance_ids"]
    await wait_lambda(lam, iid, "active")
    noticed = admin.preempt(iid, notice_s=0.2)
    assert noticed["extra"]["preemption_at"] == pytest.approx(noticed["extra"]["preemption_notice_at"] + 0.2)
    await wait_lambda(lam, iid, "preempted")
    gone = admin.machine(iid)
    assert (gone["status"], gone["detail"]) == ("terminated", "preempted")
    assert gone["ended_at"] >= noticed["extra"]["preemption_at"]


async def test_kill_makes_local_machine_error(local: httpx.AsyncClient, admin: FakeCloudAdmin,
                                              pubkey: str) -> None:
    m = (await create_local(local, pubkey)).json()
    await wait_local(local, m["id"])
    admin.kill(m["id"])
    dead = (await local.get(f"/machines/{m['id']}")).json()
    assert dead["status"] == "error" and dead["host"] is None


async def test_boot_now_ends_a_held_boot_and_only_a_boot(local: httpx.AsyncClient, admin: FakeCloudAdmin,
                                                         pubkey: str) -> None:
    """A machine created while boots are held stays pending however slow the host (no race for a
    test reading it booting), and comes up once told to; a machine that is not booting is refused."""
    assert admin.configure(hold_boots=True)["hold_boots"] is True
    m = (await create_local(local, pubkey)).json()
    assert admin.configure(hold_boots=False)["boot_delay"] == 0.1  # the boot delay itself unchanged
    assert (await local.get(f"/machines/{m['id']}")).json()["status"] == "pending"
    held = admin.machine(m["id"])
    assert held["boot_at"] - held["created_at"] > 24 * 3600
    assert admin.boot_now(m["id"])["status"] == "pending"  # its boot (the SSH server's start) is under way
    await wait_local(local, m["id"])
    for machine_id, status in ((m["id"], 400), ("no-such-machine", 404)):  # running now; unknown
        with pytest.raises(FakeCloudAdminError) as err:
            admin.boot_now(machine_id)
        assert err.value.status == status
    admin.configure(hold_boots=True)
    admin.reset()  # a fresh cloud holds no boot
    assert admin.configure()["hold_boots"] is False


def test_admin_refuses_bad_rules(admin: FakeCloudAdmin) -> None:
    for kwargs in ({"kind": "explode"}, {"kind": "latency", "when": "during"},
                   {"kind": "latency", "bogus": 1}, {"kind": "capacity", "times": 0},
                   {"kind": "barrier"}, {"kind": "barrier", "times": -1}):
        with pytest.raises(FakeCloudAdminError) as err:
            admin.add_fault("local", "create", **kwargs)  # type: ignore[arg-type]
        assert err.value.status == 400
    with pytest.raises(FakeCloudAdminError):
        admin.add_fault("no-such-cloud", "create", "capacity")
    with pytest.raises(FakeCloudAdminError) as err:
        admin.kill("no-such-machine")
    assert err.value.status == 404


async def test_a_barrier_holds_each_call_until_all_have_arrived() -> None:
    """Counted in event-loop turns, not seconds: the first create stays held however long the
    second takes to come, and both go once it has."""
    book = FaultBook()
    book.add(FaultRule.build("lambda", "create", "barrier", times=2, facades=["lambda"]))
    first = asyncio.create_task(book.take("lambda", "create").before())
    for _ in range(50):
        await asyncio.sleep(0)
    assert not first.done()  # held: the other call has not come
    assert book.rules != []
    await asyncio.wait_for(book.take("lambda", "create").before(), 10)  # the last one: not held
    await asyncio.wait_for(first, 10)  # released with it
    assert book.rules == []  # used up: the next create is not held
    await asyncio.wait_for(book.take("lambda", "create").before(), 10)


async def test_a_barrier_whose_other_calls_never_come_lets_its_call_go() -> None:
    book = FaultBook()
    book.add(FaultRule.build("lambda", "create", "barrier", times=2, seconds=0.01, facades=["lambda"]))
    await asyncio.wait_for(book.take("lambda", "create").before(), 10)

"""The Lambda adapter against the simulated Lambda (and, for codes the simulation never sends, a
mock transport): the seed's capability row, rulesets for --port, tags, images, k3s at boot,
`preempted`, error codes, and its pacing under the documented rate limits."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest
import sqlalchemy as sa

from fakeclouds import lambda_api
from fakeclouds.server import FakeCloudServer
from providers import pacing
from providers.base import (
    AuthError,
    CapacityError,
    ConnectionOptions,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    Ownership,
    RateLimited,
    Transient,
    Unsupported,
)
from providers.credentials import ApiKeyCredentials
from providers.lambda_ import LAUNCH, LambdaProvider, image_spec, instance_name
from store import migrate, pacing_slots
from tests.eventually import eventually
from tests.lambda_.conftest import PUBLIC, SCALE, adapter, offer, spec
from tests.store.conftest import postgres_schema, postgres_url  # noqa: F401 — postgres_url: a fixture

WITHIN = 20.0


async def wait_state(p: LambdaProvider, ref: InstanceRef, done: Callable[[InstanceStatus | None], bool]
                     ) -> InstanceStatus | None:
    return await eventually(lambda: p.get(ref), until=done, within=WITHIN, what=f"{ref.instance_id}'s state")


def running(st: InstanceStatus | None) -> bool:
    return st is not None and st.state == InstanceState.RUNNING


def gone(st: InstanceStatus | None) -> bool:
    return st is None or st.state == InstanceState.TERMINATED


def rulesets(sim: FakeCloudServer, name: str) -> list[dict[str, Any]]:
    return [r for r in lambda_api.lambda_firewall.rulesets(sim.engine).values() if r["name"] == name]


def test_capabilities_are_the_seed_row() -> None:
    caps = LambdaProvider.capabilities
    assert (caps.k3s, caps.k8s_api, caps.ports, caps.spot, caps.custom_image, caps.login_user) == (
        "cloud-init", True, True, False, True, "ubuntu")
    assert caps.side_resources == ["firewall-ruleset"]  # the SSH key object is the installation's
    assert "us-midwest-2" in caps.regions and caps.default_regions
    assert all(r.startswith("us-") for r in caps.default_regions) and "us-east-1" in caps.default_regions
    assert caps.launches_per_s == pytest.approx(1 / 12)


def test_image_is_an_id_or_a_family() -> None:
    assert image_spec("ddaedf1b7a0e41ac981711504493b242") == {"id": "ddaedf1b7a0e41ac981711504493b242"}
    uuid_id = "43336648-096d-4cba-9aa2-f9bb7727639d"
    assert image_spec(uuid_id) == {"id": uuid_id}
    assert image_spec("lambda-stack-22-04") == {"family": "lambda-stack-22-04"}


async def test_ports_get_a_ruleset_with_ssh_removed_once_the_machine_is_gone(sim: FakeCloudServer,
                                                                             p: LambdaProvider) -> None:
    s = spec(p, ports=[8080])
    name = instance_name(p.installation_id, s.key)
    ref = await p.create(await offer(p), s)
    [rs] = rulesets(sim, name)
    assert rs["region"] == "us-east-1"
    assert {(r["protocol"], tuple(r["port_range"])) for r in rs["rules"]} == {("tcp", (22, 22)),
                                                                               ("tcp", (8080, 8080))}
    machine = sim.admin.machine(ref.instance_id)
    assert machine["extra"]["firewall_rulesets"] == [rs["id"]]
    assert {"key": "gpuprov-installation", "value": p.installation_id} in machine["extra"]["tags"]
    assert {"key": "gpuprov-key", "value": s.key} in machine["extra"]["tags"]
    assert await p.create(await offer(p), s) == ref  # found again: no second ruleset, no second machine
    assert len(rulesets(sim, name)) == 1

    sim.admin.configure(terminate_delay=2)  # the ruleset stays in use while the machine terminates
    await p.terminate(ref)  # does not fail on the ruleset in use
    assert rulesets(sim, name), "still attached to a terminating instance"
    with pytest.raises(Transient, match="still in use"):
        await p.release(s.key)
    await wait_state(p, ref, gone)
    await p.release(s.key)
    assert rulesets(sim, name) == [] and not [k for k in sim.admin.side_resources() if name == k["name"]]


async def test_a_refused_launch_leaves_a_ruleset_listed_for_release(sim: FakeCloudServer,
                                                                    p: LambdaProvider) -> None:
    s = spec(p, ports=[9000])
    sim.admin.add_fault("lambda", "create", "server_error", status=503)
    with pytest.raises(Transient):
        await p.create(await offer(p), s)
    left = {r.kind for r in await p.list_owned() if r.key == s.key}
    assert left == {"firewall-ruleset"}
    await p.release(s.key)
    assert [r for r in await p.list_owned() if r.key == s.key] == []

    sim.admin.add_fault("lambda", "create", "capacity")  # refused for sure: removed at once
    with pytest.raises(CapacityError):
        await p.create(await offer(p), s)
    assert rulesets(sim, instance_name(p.installation_id, s.key)) == []


async def test_image_and_k3s_at_boot(sim: FakeCloudServer, p: LambdaProvider) -> None:
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    ref = await p.create(await offer(p),
                         spec(p, image="ubuntu-lts", k3s=True, ssh_public_keys=[PUBLIC, other]))
    machine = sim.admin.machine(ref.instance_id)
    assert machine["extra"]["image"] == lambda_api.image_id("ubuntu-lts", "us-east-1")
    assert "get.k3s.io" in machine["user_data"] and other in machine["public_keys"]  # through cloud-init
    plain = await p.create(await offer(p), spec(p))
    machine = sim.admin.machine(plain.instance_id)
    assert machine["user_data"] is None and machine["extra"]["image"] == lambda_api.image_id(
        lambda_api.IMAGE_FAMILIES[0][0], "us-east-1")  # the default: the latest Lambda Stack

    before = len(sim.admin.machines())
    with pytest.raises(InvalidRequest):
        await p.create(await offer(p), spec(p, image="windows-95"))
    assert len(sim.admin.machines()) == before
    with pytest.raises(InvalidRequest, match="1 MB"):
        await p.create(await offer(p), spec(p, user_data="#!/bin/sh\n" + "x" * 1_000_000))


async def test_preempted_is_gone_and_release_frees_its_ruleset(sim: FakeCloudServer,
                                                                p: LambdaProvider) -> None:
    s = spec(p, ports=[8080])
    ref = await p.create(await offer(p), s)
    await wait_state(p, ref, running)
    sim.admin.preempt(ref.instance_id)
    st = await p.get(ref)
    assert st is not None and st.state == InstanceState.TERMINATED and st.detail == "preempted"
    assert st.host is None
    assert await p.find_all(s.key) == [] and await p.find(s.key) is None
    owned = [r for r in await p.list_owned() if r.key == s.key]
    assert owned and not any(r.is_machine for r in owned)  # its ruleset: for the sweep
    await p.release(s.key)  # terminates the preempted instance that holds the ruleset, then removes it
    assert rulesets(sim, instance_name(p.installation_id, s.key)) == []
    assert await p.get(ref) is None


async def test_ownership_is_read_from_tags(sim: FakeCloudServer, p: LambdaProvider) -> None:
    ours = await p.create(await offer(p), spec(p))
    # An instance named like ours but tagged by another installation is not ours.
    name = instance_name(p.installation_id, "t-theirs")
    await p._data("POST", "/ssh-keys", json={"name": "theirs", "public_key": PUBLIC})
    await p._data("POST", LAUNCH, json={
        "region_name": "us-east-1", "instance_type_name": "gpu_1x_a10", "ssh_key_names": ["theirs"],
        "name": name, "tags": [{"key": "gpuprov-installation", "value": "someone"}]})
    assert [r.instance_id for r in await p.list_owned() if r.is_machine] == [ours.instance_id]
    # A key too long for a Lambda name is shortened in the name but whole in the tag.
    long_key = "k" + "x" * 60
    ref = await p.create(await offer(p), spec(p, key=long_key))
    assert [r.key for r in await p.list_owned() if r.instance_id == ref.instance_id] == [long_key]


async def test_unknown_ssh_key_at_launch_is_invalid(p: LambdaProvider) -> None:
    with pytest.raises(InvalidRequest, match="object-does-not-exist"):
        await p._data("POST", LAUNCH, json={"region_name": "us-east-1", "instance_type_name": "gpu_1x_a10",
                                            "ssh_key_names": ["nobody"]})


# --------------------------------------------------------------------------- codes the sim never sends


def mocked(handler: Callable[[httpx.Request], httpx.Response]) -> LambdaProvider:
    p = LambdaProvider(ApiKeyCredentials(api_key="k"),  # type: ignore[arg-type]
                       options=ConnectionOptions(endpoint="http://lambda.test/api/v1"),
                       installation_id="inst0001")
    p._transport = httpx.MockTransport(handler)
    return p


def error(status: int, code: str, **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": "m"}}, headers=headers)


@pytest.mark.parametrize(("status", "code", "kind"), [
    (400, "provider/internal-unavailable", Transient),
    (503, "provider/network-outage", Transient),
    (403, "global/invalid-address", AuthError),
    (403, "global/forbidden", AuthError),
    (404, "global/object-does-not-exist", InvalidRequest),
    (409, "global/conflict", Transient),
    (429, "whatever", RateLimited),
])
async def test_error_codes(status: int, code: str, kind: type[Exception]) -> None:
    async with mocked(lambda _: error(status, code)) as p:
        with pytest.raises(kind):
            await p.offers(OfferQuery())


async def test_a_429_without_retry_after_is_rate_limited() -> None:
    async with mocked(lambda _: httpx.Response(429, text="slow down")) as p:
        with pytest.raises(RateLimited) as exc:
            await p.verify()
    assert exc.value.retry_after > 0 and "slow down" not in exc.value.message  # never quoted


async def test_ssh_key_delete_of_an_unknown_id_is_tolerated() -> None:
    """1.8.3 answers an unknown key id with 400 global/invalid-parameters, 1.10 with 404 global/not-found."""
    for answer in (error(400, "global/invalid-parameters"), error(404, "global/not-found")):
        def handler(req: httpx.Request, answer: httpx.Response = answer) -> httpx.Response:
            if req.method == "DELETE":
                return answer
            if req.url.path.endswith("/ssh-keys"):
                return httpx.Response(200, json={"data": [{"id": "k9", "name": "gpuprov-inst0001-key-1"}]})
            return httpx.Response(200, json={"data": []})
        async with mocked(handler) as p:
            await p.release("key-1")


# --------------------------------------------------------------------------- pacing


async def test_concurrent_creates_are_paced_under_the_limits(sim: FakeCloudServer, p: LambdaProvider) -> None:
    """Five creates at once with a watch polling beside them, against the documented limits (at the
    session's scale): every one succeeds, no call is refused, launches leave ≥ 12 s (scaled) apart."""
    sim.admin.set_stock("gpu_1x_a10", "us-east-1", 5)
    o = await offer(p)
    statuses: list[int] = []

    async def record(resp: httpx.Response) -> None:
        statuses.append(resp.status_code)

    p._http().event_hooks["response"].append(record)
    pacer = p.pacer()
    sent = len(pacer.launch_times)
    creating = asyncio.gather(*(p.create(o, spec(p)) for _ in range(5)))
    while not creating.done():
        await p.list_owned()  # a watch shares the budget
    refs = await creating
    assert len({r.instance_id for r in refs}) == 5
    assert 429 not in statuses and lambda_api.rate_limited(sim.engine) == 0
    launches = list(pacer.launch_times)[sent:]
    assert len(launches) == 5
    assert all(b - a >= 12.0 * SCALE for a, b in zip(launches, launches[1:], strict=False))


# Fast enough to keep the test short (3 launches 1.2 s apart), slow enough that the pacer, not the
# latency of a loopback call (milliseconds), is what spaces the calls, as at real speed: both sides
# scale every documented interval by the same factor, so the pacer and the simulator agree exactly as
# they do at 1.
PACED_SCALE = 0.1


async def test_pacing_where_the_pacer_binds(sim: FakeCloudServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lambda's documented limits at a time scale where the pacer binds, on both sides (the session's
    0.001 makes every interval shorter than a call): three launches and a watch polling meanwhile.
    No call is refused; launches leave >= 12 s (scaled) apart."""
    monkeypatch.setenv(pacing.TIME_SCALE_ENV, str(PACED_SCALE))
    sim.admin.configure(time_scale=PACED_SCALE)
    p = adapter(sim)
    async with p:
        statuses: list[int] = []

        async def record(resp: httpx.Response) -> None:
            statuses.append(resp.status_code)

        p._http().event_hooks["response"].append(record)
        pacer = p.pacer()
        assert pacer.scale == PACED_SCALE and pacer.launch_interval == pytest.approx(12.0 * PACED_SCALE)
        assert pacer.interval == pytest.approx(1.0 * PACED_SCALE)

        async def add_key() -> None:  # the account's key, made beside the API (no call to count)
            sim.engine.add_ssh_key("lambda", "real-speed", PUBLIC)
        sim.call(add_key())

        async def launches() -> None:
            for i in range(3):
                await p._data("POST", LAUNCH, json={
                    "region_name": "us-east-1", "instance_type_name": "gpu_1x_a10",
                    "ssh_key_names": ["real-speed"], "name": f"real-speed-{i}"})

        launching = asyncio.ensure_future(launches())
        await asyncio.sleep(0)  # the first launch goes first
        polls = 0
        while not launching.done():
            await p.find_all("t-watched")  # one call each, paced one per (scaled) second beside the launches
            polls += 1
        await launching
    assert polls >= 2 and 429 not in statuses and lambda_api.rate_limited(sim.engine) == 0
    assert len([m for m in sim.admin.machines() if m["name"].startswith("real-speed-")]) == 3
    times = list(pacer.launch_times)[-3:]
    assert all(b - a >= 12.0 * PACED_SCALE for a, b in zip(times, times[1:], strict=False))


async def test_two_processes_of_one_host_share_the_keys_budget(
        sim: FakeCloudServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two processes with the same key (the API's and a worker's, as `make run` and docker-compose
    run them) — here two event loops, each with pacers of its own — poll at once where the pacer
    binds. Sharing GPUPROV_HOME/pacing (`pacing.shared_dir`), the cloud sees one key's calls a
    (scaled) second apart: none is refused. Each process on its own sends twice the limit."""
    monkeypatch.setenv(pacing.TIME_SCALE_ENV, str(PACED_SCALE))
    monkeypatch.setattr(pacing, "shared_dir", tmp_path / "pacing")
    sim.admin.configure(time_scale=PACED_SCALE)
    statuses = await _two_processes_poll_and_launch(sim, "two-processes")
    assert len(statuses) == 14 and set(statuses) == {200}, statuses
    assert lambda_api.rate_limited(sim.engine) == 0  # the calls' limit, and the launches' (12 s)
    assert sorted(f.suffix for f in (tmp_path / "pacing").iterdir()) == [".calls", ".launches"]


async def test_two_hosts_share_the_keys_budget_through_the_database(
        sim: FakeCloudServer, monkeypatch: pytest.MonkeyPatch, postgres_url: str) -> None:  # noqa: F811
    """Two processes on different hosts with the same key — two event loops sharing no lock file —
    poll and launch at once where the pacer binds. Each holding the key's lanes in PostgreSQL while
    it calls (`pacing.cross_host`: store/pacing_slots.py, as the worker and the API set it there), the
    cloud refuses none of their calls; with neither, it refused some."""
    monkeypatch.setenv(pacing.TIME_SCALE_ENV, str(PACED_SCALE))
    monkeypatch.setattr(pacing, "shared_dir", None)
    sim.admin.configure(time_scale=PACED_SCALE)
    with postgres_schema(postgres_url) as engine:
        migrate.upgrade(engine)
        lanes = pacing_slots.DatabaseLanes(engine)  # what pacing_slots.lanes gives on PostgreSQL
        monkeypatch.setattr(pacing, "cross_host", lanes.held)
        try:
            statuses = await _two_processes_poll_and_launch(sim, "two-hosts")
        finally:
            lanes.dispose()
        with engine.connect() as conn:
            lanes = conn.execute(sa.text("SELECT lane FROM pacing_slot")).scalars().all()
    assert len(statuses) == 14 and set(statuses) == {200}, statuses
    assert lambda_api.rate_limited(sim.engine) == 0  # the calls' limit, and the launches' (12 s)
    assert sorted(lane.rsplit(".", 1)[1] for lane in lanes) == ["calls", "launches"]  # one key's lanes


async def _two_processes_poll_and_launch(sim: FakeCloudServer, name: str) -> list[int]:
    """Two event loops (as two processes), each with its own adapter of one key: six polls and a
    launch each, at once. The statuses the cloud answered."""
    sim.call(_add_key(sim, name))
    statuses: list[int] = []

    async def polls_and_a_launch(n: int) -> None:
        async with adapter(sim) as p:
            async def record(resp: httpx.Response) -> None:
                statuses.append(resp.status_code)

            p._http().event_hooks["response"].append(record)
            for _ in range(6):
                await p.find_all(f"t-{name}")
            await p._data("POST", LAUNCH, json={
                "region_name": "us-east-1", "instance_type_name": "gpu_1x_a10",
                "ssh_key_names": [name], "name": f"{name}-{n}"})

    await asyncio.gather(*(asyncio.to_thread(asyncio.run, polls_and_a_launch(n)) for n in range(2)))
    return statuses


async def _add_key(sim: FakeCloudServer, name: str) -> None:  # the account's key, made beside the API
    sim.engine.add_ssh_key("lambda", name, PUBLIC)


async def test_an_offer_outside_the_capabilities_regions_is_refused_before_any_call() -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        raise AssertionError("no call expected")

    bad = Offer(provider="lambda", instance_type="gpu_1x_a10", vcpus=1, memory_gib=1, region="mars-1",
                price_per_hour=1)
    s = LaunchSpec(key="k-1", owner=Ownership(installation_id="inst0001", allocation_id="a"),
                   ssh_public_keys=[PUBLIC])
    async with mocked(handler) as q:
        with pytest.raises(Unsupported, match="no region"):
            await q.create(bad, s)

"""Fleet hosts cannot make this installation a port scanner (finding M2): POST and PUT
/api/compute/fleets refuse (422, with the reason) a host or bastion that is loopback, link-local, a
cloud metadata service, unspecified, multicast or reserved — unless an administrator allows its
network (GPUPROV_FLEET_ALLOWED_NETWORKS) — and, allowed or not, this installation's own API,
Temporal and database. Names are resolved once (a FAKE resolver here) and every address checked.
A refused fleet is not stored, no probe starts, and no socket is dialled."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import asyncssh
import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from activities.deps import ActivityDeps
from activities.fleet import FleetActivities
from api.deps import AppDeps
from messages import workflows as wf
from messages.fleet import FleetHostInput
from providers import registry
from providers.base import AuthError, LaunchSpec, Offer, Ownership
from providers.fleet_addresses import (
    AddressRefused,
    FleetAddresses,
    checked_login,
    parse_networks,
    services_of,
)
from providers.ssh_fleet import SshFleetProvider
from providers.ssh_login import Bastion, HostLogin
from settings import Settings
from store import fleets
from store import ids as id_store
from store.models import Fleet, FleetHost
from store.secrets import SecretBox
from tests.api.conftest import TOKEN, FakeWorkflows, app_serving
from tests.fake_resolver import FakeResolver

FLEETS = "/api/compute/fleets"
_KEY = asyncssh.generate_private_key("ssh-ed25519")
KEY, PUBLIC = _KEY.export_private_key().decode(), _KEY.export_public_key().decode().strip()
DB_PASSWORD = "db-pass-never-shown-91c"
NAMES = {"loop.lab.example": ["127.0.0.7"], "meta.lab.example": ["169.254.169.254"],
         "mixed.lab.example": ["10.0.0.8", "169.254.169.254"], "v6meta.lab.example": ["fd00:ec2::254"],
         "gpu.lab.example": ["10.0.0.9", "fd12::9"], "db.internal": ["10.20.30.40"],
         "temporal.internal": ["10.20.30.41"]}


@pytest.fixture
def dials(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every socket connection attempted meanwhile (each refused): a refusal must dial nothing."""
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise ConnectionRefusedError("a test refused to dial")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    yield attempts


def addresses(allowed: str = "", **settings: Any) -> tuple[FleetAddresses, FakeResolver]:
    resolver = FakeResolver(table=dict(NAMES), default=None)
    s = Settings(api_url="http://127.0.0.1:8000", temporal_address="temporal.internal:7233",
                 database_url=f"postgresql+psycopg://gp:{DB_PASSWORD}@db.internal/gpuprov",
                 fleet_allowed_networks=allowed, **settings)
    return FleetAddresses.from_settings(s, resolver=resolver), resolver


async def _client(engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows,
                  policy: FleetAddresses) -> AsyncIterator[httpx.AsyncClient]:
    deps = AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="inst0001", workflows=workflows,
                   fleet_addresses=policy)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app_serving(deps)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


@pytest.fixture
async def strict(engine: sa.Engine, box: SecretBox,
                 workflows: FakeWorkflows) -> AsyncIterator[httpx.AsyncClient]:
    """The defaults: no network allowed beyond the rules."""
    async for c in _client(engine, box, workflows, addresses()[0]):
        yield c


@pytest.fixture
async def loopback_allowed(engine: sa.Engine, box: SecretBox,
                           workflows: FakeWorkflows) -> AsyncIterator[httpx.AsyncClient]:
    """As the dev stack and the fleet tests run: 127.0.0.0/8 allowed."""
    async for c in _client(engine, box, workflows, addresses("127.0.0.0/8, ::1/128")[0]):
        yield c


def fleet(hosts: list[str], port: int = 22, **kw: Any) -> dict[str, Any]:
    return {"name": "rack", "private_key": KEY, "hosts": hosts, "port": port, **kw}


def nothing_saved(engine: sa.Engine, workflows: FakeWorkflows) -> None:
    with Session(engine) as s:
        assert s.exec(select(Fleet)).first() is None
    assert workflows.starts_of(wf.FLEET_PROBE.name) == []


@pytest.mark.parametrize(("hosts", "port", "why"), [
    (["127.0.0.1"], 8000, "127.0.0.1 port 8000 is the API of this installation"),
    (["127.44.0.9"], 8000, "is the API of this installation"),  # every loopback address is this machine
    (["::1"], 8000, "is the API of this installation"),
    (["0.0.0.0"], 8000, "is the API of this installation"),
    (["::ffff:127.0.0.1"], 8000, "is the API of this installation"),
    (["loop.lab.example"], 8000, "is the API of this installation"),
    (["10.20.30.41"], 7233, "is Temporal of this installation"),
    (["temporal.internal"], 7233, "is Temporal of this installation"),
    (["10.20.30.40"], 5432, "is the database of this installation"),
    (["db.internal"], 5432, "is the database of this installation"),
])
async def test_the_installations_own_services_are_refused_even_with_loopback_allowed(
        loopback_allowed: httpx.AsyncClient, engine: sa.Engine, workflows: FakeWorkflows, dials: list[Any],
        hosts: list[str], port: int, why: str) -> None:
    r = await loopback_allowed.post(FLEETS, json=fleet(["10.0.0.5", *hosts], port))
    assert r.status_code == 422 and why in r.json()["detail"], r.text
    assert DB_PASSWORD not in r.text
    nothing_saved(engine, workflows)
    assert dials == []


async def test_a_bastion_on_an_own_service_is_refused(loopback_allowed: httpx.AsyncClient, engine: sa.Engine,
                                                      workflows: FakeWorkflows, dials: list[Any]) -> None:
    r = await loopback_allowed.post(FLEETS, json=fleet(["10.0.0.5"], bastion={"host": "127.0.0.1",
                                                                              "port": 8000}))
    assert r.status_code == 422 and "the API of this installation" in r.text, r.text
    # Behind a bastion the host's name is the bastion's to resolve, but its name and literal address
    # are still compared: the database by its name, a metadata address as such.
    for hosts, port in ((["db.internal"], 5432), (["169.254.169.254"], 80),
                        (["metadata.google.internal"], 80)):
        r = await loopback_allowed.post(FLEETS, json=fleet(hosts, port, bastion={"host": "10.0.0.2"}))
        assert r.status_code == 422, r.text
    nothing_saved(engine, workflows)
    assert dials == []


async def test_loopback_allowed_is_usable_off_the_service_ports(loopback_allowed: httpx.AsyncClient) -> None:
    r = await loopback_allowed.post(FLEETS, json=fleet(["127.0.0.1", "127.8.9.10", "loop.lab.example"], 2222))
    assert r.status_code == 201, r.text


@pytest.mark.parametrize(("host", "why"), [
    ("169.254.169.254", "a cloud metadata service"),
    ("fd00:ec2::254", "a cloud metadata service"),
    ("100.100.100.200", "a cloud metadata service"),
    ("::ffff:169.254.169.254", "a cloud metadata service"),
    ("metadata.google.internal", "a cloud metadata service"),
    ("METADATA.google.internal.", "a cloud metadata service"),
    ("metadata", "a cloud metadata service"),
    ("meta.lab.example", "meta.lab.example (resolves to 169.254.169.254) is a cloud metadata service"),
    ("v6meta.lab.example", "a cloud metadata service"),
    ("mixed.lab.example", "a cloud metadata service"),  # one bad address among good ones
    ("169.254.10.1", "link-local"),
    ("fe80::1", "link-local"),
    ("127.0.0.1", "this machine (loopback)"),
    ("127.200.1.1", "this machine (loopback)"),
    ("::1", "this machine (loopback)"),
    ("localhost", "this machine (loopback)"),
    ("loop.lab.example", "loop.lab.example (resolves to 127.0.0.7) is this machine (loopback)"),
    ("0.0.0.0", "this machine"),
    ("::", "this machine"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("255.255.255.255", "reserved"),
    ("240.1.2.3", "reserved"),
    ("0177.0.0.1", "non-standard form"),
    ("2130706433", "non-standard form"),
    ("0x7f.1", "non-standard form"),
    ("nowhere.lab.example", "does not resolve"),
])
async def test_refused_by_default_with_the_reason_and_nothing_dialled(
        strict: httpx.AsyncClient, engine: sa.Engine, workflows: FakeWorkflows, dials: list[Any],
        host: str, why: str) -> None:
    r = await strict.post(FLEETS, json=fleet(["10.0.0.5", host]))
    assert r.status_code == 422 and why in r.json()["detail"], r.text
    r = await strict.post(FLEETS, json=fleet(["10.0.0.5"], bastion={"host": host}))
    assert r.status_code == 422 and why in r.json()["detail"], r.text
    nothing_saved(engine, workflows)
    assert dials == []


async def test_private_ranges_and_names_resolving_there_are_the_normal_case(
        strict: httpx.AsyncClient) -> None:
    hosts = ["10.0.0.5", "192.168.1.20", "172.16.4.4", "fd12::1", "100.64.1.1", "gpu.lab.example"]
    r = await strict.post(FLEETS, json=fleet(hosts, bastion={"host": "192.168.1.1"}))
    assert r.status_code == 201, r.text
    assert [h["host"] for h in r.json()["hosts"]][-1] == "gpu.lab.example"  # stored as given


async def test_a_name_behind_a_bastion_is_not_resolved_here(engine: sa.Engine, box: SecretBox,
                                                            workflows: FakeWorkflows) -> None:
    policy, resolver = addresses()
    async for c in _client(engine, box, workflows, policy):
        r = await c.post(FLEETS, json=fleet(["gpu-behind.invalid"], bastion={"host": "10.0.0.2"}))
        assert r.status_code == 201, r.text
    assert "gpu-behind.invalid" not in resolver.asked


async def test_put_cannot_add_a_refused_host_and_the_saved_fleet_stays(
        strict: httpx.AsyncClient, engine: sa.Engine, dials: list[Any]) -> None:
    made = await strict.post(FLEETS, json=fleet(["10.0.0.5"]))
    assert made.status_code == 201, made.text
    fleet_id = made.json()["id"]
    for body in (fleet(["10.0.0.5", "169.254.169.254"]), fleet(["10.0.0.5"], bastion={"host": "127.0.0.1"})):
        r = await strict.put(f"{FLEETS}/{fleet_id}", json={**body, "private_key": ""})
        assert r.status_code == 422, r.text
    with Session(engine) as s:
        kept = s.exec(select(FleetHost).where(FleetHost.fleet_id == fleet_id))
        assert [h.host for h in kept] == ["10.0.0.5"]
        row = s.get(Fleet, fleet_id)
        assert row is not None and row.bastion_host is None
    assert dials == []


async def test_an_administrator_may_allow_a_network(engine: sa.Engine, box: SecretBox,
                                                    workflows: FakeWorkflows) -> None:
    policy, _ = addresses("169.254.10.0/24")
    async for c in _client(engine, box, workflows, policy):
        assert (await c.post(FLEETS, json=fleet(["169.254.10.7"]))).status_code == 201
        assert (await c.post(FLEETS, json=fleet(["169.254.11.7"]))).status_code == 422


def test_the_rules_directly() -> None:
    policy, _ = addresses()
    assert policy.check("gpu.lab.example", 22).address == "10.0.0.9"  # what to connect to: checked
    assert policy.check("10.0.0.5", 22).address == "10.0.0.5"
    with pytest.raises(AddressRefused):
        policy.check("127.0.0.1", 22)
    api, temporal = services_of("https://gpuprov.example.com", "127.0.0.1:7233", "sqlite:///x.db")
    assert (api.what, api.host, api.port) == ("the API", "gpuprov.example.com", 443)
    assert (temporal.what, temporal.host, temporal.port) == ("Temporal", "127.0.0.1", 7233)
    assert [str(n) for n in parse_networks(" 127.0.0.0/8 , fd00::/8,")] == ["127.0.0.0/8", "fd00::/8"]
    with pytest.raises(ValueError, match="not a network"):
        parse_networks("127.0.0.0/8,bogus")


# --------------------------------------------------------------------------- where the probe connects


def _stored_fleet(engine: sa.Engine, box: SecretBox, hosts: list[str], port: int = 22,
                  bastion: fleets.Bastion | None = None) -> tuple[str, dict[str, str]]:
    """A fleet written straight to the store (as one saved before these rules was): its id and
    host ids by host."""
    with Session(engine) as s:
        row = fleets.save_fleet(s, box, fleet_id=id_store.new_id(), project="default", name="old",
                                user="ubuntu", port=port, hosts=hosts, private_key=KEY, bastion=bastion,
                                new_host_id=id_store.new_id, probe_id="p1")
        return row.id, {h.host: h.id for h in fleets.hosts_of(s, row.id)}


@pytest.mark.parametrize(("host", "why"), [("169.254.169.254", "a cloud metadata service"),
                                           ("loop.lab.example", "this machine (loopback)"),
                                           ("127.0.0.1", "this machine (loopback)")])
async def test_the_probe_checks_again_and_refuses_before_dialling(
        engine: sa.Engine, box: SecretBox, dials: list[Any], host: str, why: str) -> None:
    policy, _ = addresses()
    deps = ActivityDeps(engine=engine, box=box, installation_id="inst0001", fleet_addresses=policy)
    fleet_id, ids = _stored_fleet(engine, box, [host])
    probe = await FleetActivities(deps).probe_fleet_host(
        FleetHostInput(fleet_id=fleet_id, probe_id="p1", host_id=ids[host], connect_timeout_s=5))
    assert probe.reachable is False and probe.reason is not None and why in probe.reason
    with Session(engine) as s:  # the answer is what GET shows
        row = s.get(FleetHost, ids[host])
        assert row is not None and row.reachable is False and row.reason == probe.reason
    assert dials == []


async def test_a_name_that_changed_since_it_was_saved_is_judged_by_what_it_resolves_to_now(
        engine: sa.Engine, box: SecretBox, dials: list[Any]) -> None:
    policy, resolver = addresses()
    fleet_id, ids = _stored_fleet(engine, box, ["gpu.lab.example"])
    policy.check("gpu.lab.example", 22)  # as the API found it when the fleet was saved: private
    resolver.table["gpu.lab.example"] = ["169.254.169.254"]  # rebound since
    deps = ActivityDeps(engine=engine, box=box, installation_id="inst0001", fleet_addresses=policy)
    probe = await FleetActivities(deps).probe_fleet_host(
        FleetHostInput(fleet_id=fleet_id, probe_id="p1", host_id=ids["gpu.lab.example"], connect_timeout_s=5))
    assert probe.reason is not None and "resolves to 169.254.169.254" in probe.reason
    assert dials == []


def test_the_login_dials_the_checked_addresses() -> None:
    policy, resolver = addresses()
    key = asyncssh.generate_private_key("ssh-ed25519")
    direct = checked_login(policy, HostLogin(host="gpu.lab.example", port=22, user="u", key=key))
    assert direct.host == "10.0.0.9"
    jump = Bastion(host="gpu.lab.example", port=22, user="j", key=key)
    behind = checked_login(policy, HostLogin(host="inner.invalid", port=22, user="u", key=key, bastion=jump))
    assert behind.bastion is not None and behind.bastion.host == "10.0.0.9"
    # behind a bastion the name is the bastion's to resolve
    assert behind.host == "inner.invalid" and "inner.invalid" not in resolver.asked
    with pytest.raises(AddressRefused):
        checked_login(policy, HostLogin(host="10.0.0.1", port=22, user="u", key=key,
                                        bastion=replace(jump, host="169.254.169.254")))


async def test_the_fleet_adapter_refuses_before_dialling_too(dials: list[Any]) -> None:
    """The allocation steps and the offers page reach hosts through the adapter: same rules."""
    creds = {"ssh_user": "ubuntu", "ssh_port": 8000, "hosts": "169.254.169.254\n127.0.0.1\nloop.lab.example",
             "private_key": KEY}
    adapter = registry.build("ssh", creds, installation_id="inst0001")
    assert isinstance(adapter, SshFleetProvider)
    policy, _ = addresses("127.0.0.0/8")
    adapter.check_addresses(policy)
    with pytest.raises(AuthError) as refused:
        await adapter.verify()
    assert "a cloud metadata service" in refused.value.message
    assert refused.value.message.count("the API of this installation") == 2
    with pytest.raises(AuthError, match="the API of this installation"):
        await adapter.create(Offer(provider="ssh", instance_type="127.0.0.1", vcpus=1, memory_gib=1,
                                   region="on-prem", price_per_hour=0),
                             LaunchSpec(key="k-1", ssh_public_keys=[PUBLIC],
                                        owner=Ownership(installation_id="inst0001", allocation_id="a1")))
    assert dials == []

"""/api/compute/fleets: the key is sealed, never answered or logged; hosts are validated; PUT with a
blank key keeps the saved one; DELETE forgets; another project's fleet is 404."""

from __future__ import annotations

import logging
from typing import Any

import asyncssh
import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from messages import workflows as wf
from messages.fleet import FleetProbeRequest
from messages.ids import fleet_probe_workflow_id
from store.models import Fleet, FleetHost
from store.secrets import SecretBox
from tests.api.conftest import FakeWorkflows, all_items, make_project

FLEETS = "/api/compute/fleets"


def new_key() -> str:
    return asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()


def body(key: str | None, **kw: Any) -> dict[str, Any]:
    return {"name": "rack-1", "private_key": key, "hosts": ["10.0.0.5", "gpu-1.lab.example"], **kw}


def key_material(key: str) -> list[str]:
    """Lines of the key's base64 body: what would show if any of it leaked."""
    return [line for line in key.splitlines() if line and not line.startswith("-----")]


def sealed_key(engine: sa.Engine, box: SecretBox, fleet_id: str) -> str:
    with Session(engine) as s:
        row = s.get(Fleet, fleet_id)
        assert row is not None
        return box.open_text(row.secret)


async def test_create_get_list_never_show_the_key(client: httpx.AsyncClient, engine: sa.Engine,
                                                  box: SecretBox, workflows: FakeWorkflows,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    key = new_key()
    r = await client.post(FLEETS, json=body(key, bastion={"host": "192.0.2.9", "port": 2222}))
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["user"] == "ubuntu" and made["port"] == 22
    assert [h["host"] for h in made["hosts"]] == ["10.0.0.5", "gpu-1.lab.example"]
    assert all(h["probed_at"] is None and h["reachable"] is None for h in made["hosts"])
    assert made["bastion"] == {"host": "192.0.2.9", "port": 2222, "user": "ubuntu", "own_key": False,
                               "host_key_fingerprint": None}
    # Stored sealed: the row's bytes are not the key; opened, they are.
    with Session(engine) as s:
        row = s.get(Fleet, made["id"])
        assert row is not None and key_material(key)[0].encode() not in row.secret
    assert sealed_key(engine, box, made["id"]).strip() == key.strip()
    # The probe started with the fleet id only.
    [start] = workflows.starts_of(wf.FLEET_PROBE.name)
    with Session(engine) as s:
        row = s.get(Fleet, made["id"])
        assert row is not None and row.probe_id is not None
    assert start.arg == FleetProbeRequest(fleet_id=made["id"], probe_id=row.probe_id)
    assert start.workflow_id == fleet_probe_workflow_id(made["id"], row.probe_id)
    got = await client.get(f"{FLEETS}/{made['id']}")
    listed = await all_items(client, FLEETS, limit=1)
    assert got.status_code == 200 and got.json() == made and listed == [made]
    for text in (r.text, got.text, str(listed), caplog.text, repr(workflows.starts)):
        assert not any(line in text for line in key_material(key)), text


@pytest.mark.parametrize("hosts", [["a;rm -rf /"], ["$(reboot)"], ["gpu 1"], ["root@gpu1"], ["gpu1:22"],
                                   ["-oProxyCommand=x"], ["`id`"], [""], [], ["a", "a"]])
async def test_bad_hosts_are_422_and_nothing_is_stored(client: httpx.AsyncClient, engine: sa.Engine,
                                                       hosts: list[str]) -> None:
    r = await client.post(FLEETS, json=body(new_key(), hosts=hosts))
    assert r.status_code == 422, r.text
    with Session(engine) as s:
        assert s.exec(select(Fleet)).first() is None


async def test_a_key_that_is_not_a_private_key_is_422_without_echo(client: httpx.AsyncClient,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    public = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    secretish = "-----BEGIN OPENSSH PRIVATE KEY-----\nc2VjcmV0LXNlY3JldC1zZWNyZXQ=\n" \
                "-----END OPENSSH PRIVATE KEY-----\n"
    for bad in (public, secretish, "hunter2"):
        r = await client.post(FLEETS, json=body(bad))
        assert r.status_code == 422 and "not an SSH private key" in r.text, r.text
        assert "c2VjcmV0" not in r.text and "hunter2" not in r.text
    missing = await client.post(FLEETS, json=body(None))
    assert missing.status_code == 422 and "private_key is required" in missing.text
    assert "c2VjcmV0" not in caplog.text and "hunter2" not in caplog.text


async def test_put_with_a_blank_key_keeps_it_and_a_new_key_replaces_it(
        client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows) -> None:
    key = new_key()
    made = (await client.post(FLEETS, json=body(key))).json()
    with Session(engine) as s:
        kept_host = s.exec(select(FleetHost).where(FleetHost.host == "10.0.0.5")).one()
    for blank in ("", None, "   "):
        r = await client.put(f"{FLEETS}/{made['id']}",
                             json=body(blank, name="rack-2", hosts=["10.0.0.5", "10.0.0.6"], port=2200))
        assert r.status_code == 200, r.text
        assert r.json()["name"] == "rack-2" and r.json()["port"] == 2200
        assert [h["host"] for h in r.json()["hosts"]] == ["10.0.0.5", "10.0.0.6"]
        assert sealed_key(engine, box, made["id"]).strip() == key.strip()
    with Session(engine) as s:  # a host kept by name keeps its row (and so its last probe)
        assert s.exec(select(FleetHost).where(FleetHost.host == "10.0.0.5")).one().id == kept_host.id
        assert s.exec(select(FleetHost).where(FleetHost.host == "gpu-1.lab.example")).first() is None
    other = new_key()
    r = await client.put(f"{FLEETS}/{made['id']}", json=body(other))
    assert r.status_code == 200 and sealed_key(engine, box, made["id"]).strip() == other.strip()
    starts = workflows.starts_of(wf.FLEET_PROBE.name)
    assert len({s.workflow_id for s in starts}) == 5  # POST and every PUT: a probe of their own


async def test_delete_forgets_and_another_projects_fleet_is_404(client: httpx.AsyncClient,
                                                                engine: sa.Engine) -> None:
    made = (await client.post(FLEETS, json=body(new_key()))).json()
    token = await make_project(client, "other")
    theirs = {"headers": {"Authorization": f"Bearer {token}"}}
    url = f"{FLEETS}/{made['id']}"
    assert (await client.get(url, **theirs)).status_code == 404
    assert (await client.put(url, json=body(new_key()), **theirs)).status_code == 404
    assert (await client.delete(url, **theirs)).status_code == 404
    assert (await client.get(FLEETS, **theirs)).json()["items"] == []
    assert (await client.get(url)).status_code == 200  # untouched
    r = await client.delete(url)
    assert r.status_code == 200 and r.json() == {"id": made["id"], "deleted": True}
    assert (await client.get(url)).status_code == 404
    with Session(engine) as s:
        assert s.exec(select(FleetHost)).first() is None


def pin(engine: sa.Engine, fleet_id: str, key: str) -> None:
    """What the first successful probe records (store/fleets.record_probe): every host's and the
    bastion's key."""
    with Session(engine) as s:
        for h in s.exec(select(FleetHost).where(FleetHost.fleet_id == fleet_id)):
            h.host_key = key
            s.add(h)
        row = s.get(Fleet, fleet_id)
        assert row is not None
        row.bastion_host_key = key
        s.add(row)
        s.commit()


async def test_pins_survive_a_put_and_trust_forgets_only_those_named(
        client: httpx.AsyncClient, engine: sa.Engine, workflows: FakeWorkflows) -> None:
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    line = host_key.export_public_key().decode().strip()
    fp = host_key.get_fingerprint("sha256")
    made = (await client.post(FLEETS, json=body(new_key(), bastion={"host": "192.0.2.9"}))).json()
    pin(engine, made["id"], line)
    url = f"{FLEETS}/{made['id']}"
    # PUT keeps the pins of kept hosts and of the same bastion; a new host starts unpinned.
    r = await client.put(url, json=body(None, hosts=["10.0.0.5", "gpu-1.lab.example", "10.0.0.7"],
                                        bastion={"host": "192.0.2.9"}))
    assert [h["host_key_fingerprint"] for h in r.json()["hosts"]] == [fp, fp, None]
    assert r.json()["bastion"]["host_key_fingerprint"] == fp
    r = await client.put(url, json=body(None, bastion={"host": "192.0.2.10"}))  # another bastion
    assert r.json()["bastion"]["host_key_fingerprint"] is None
    assert [h["host_key_fingerprint"] for h in r.json()["hosts"]] == [fp, fp]

    before = len(workflows.starts_of(wf.FLEET_PROBE.name))
    for bad in ({}, {"hosts": ["10.9.9.9"]}, {"hosts": ["a;b"]}):
        assert (await client.post(f"{url}/trust", json=bad)).status_code == 422
    token = await make_project(client, "other")
    r = await client.post(f"{url}/trust", json={"hosts": ["10.0.0.5"]},
                          headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 404
    r = await client.post(f"{url}/trust", json={"hosts": ["10.0.0.5"]})
    assert r.status_code == 200, r.text
    assert [h["host_key_fingerprint"] for h in r.json()["hosts"]] == [None, fp]
    # It probes again, as the fleet's latest probe (so the answer is pinned).
    [start] = workflows.starts_of(wf.FLEET_PROBE.name)[before:]
    with Session(engine) as s:
        row = s.get(Fleet, made["id"])
        assert row is not None and start.arg == FleetProbeRequest(fleet_id=made["id"], probe_id=row.probe_id)


async def test_a_query_no_fleet_can_serve_is_refused_with_the_reason_once(client: httpx.AsyncClient) -> None:
    """A region or spot no fleet has: a 422 saying so (as a cloud's refusal of a query is), not a
    502 listing every fleet as failed (make fuzz found the 502). Nothing is asked of any host."""
    for name in ("rack-1", "rack-2"):
        assert (await client.post(FLEETS, json=body(new_key(), name=name))).status_code == 201
    r = await client.get("/api/compute/backends/ssh/offers", params={"region": "nowhere"})
    assert r.status_code == 422 and r.json()["detail"] == "SSH fleet has no region 'nowhere'", r.text
    r = await client.get("/api/compute/backends/ssh/offers", params={"spot": "true"})
    assert r.status_code == 422 and "spot" in r.json()["detail"] and ";" not in r.json()["detail"], r.text

"""The simulated Verda API refuses what the real one refuses and models its quirks (raw HTTP, as the
official SDK calls it)."""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx

from fakeclouds import verda_api, verda_catalog
from fakeclouds.server import FakeCloudServer
from tests.eventually import eventually
from tests.fakeclouds.helpers import WITHIN
from tests.verda.conftest import PUBKEY, base_url, token


def _err(r: httpx.Response) -> tuple[int, str, str]:
    body = r.json()
    return r.status_code, body["code"], body["message"]


async def _key(api: httpx.AsyncClient) -> str:
    r = await api.post("/sshkeys", json={"name": "mine", "key": PUBKEY})
    assert r.is_success, r.text
    return r.text


def _body(key_id: str, **fields: Any) -> dict[str, Any]:
    return {"instance_type": "1H100.80S.30V", "image": verda_catalog.CUDA_24, "hostname": "box-1",
            "description": "d", "ssh_key_ids": [key_id], "location_code": "FIN-01",
            "os_volume": {"name": "os-box-1", "size": 60}, **fields}


async def _create(api: httpx.AsyncClient, **fields: Any) -> str:
    r = await api.post("/instances", json=_body(await _key(api), **fields))
    assert r.is_success and r.headers["content-type"].startswith("text/plain"), r.text
    return r.text


async def _running(api: httpx.AsyncClient, iid: str) -> dict[str, Any]:
    async def check() -> Any:
        inst = (await api.get(f"/instances/{iid}")).json()
        return inst if inst["status"] == "running" else None
    return dict(await eventually(check, within=WITHIN, what=f"{iid} running"))


async def _delete(api: httpx.AsyncClient, iid: str, **fields: Any) -> httpx.Response:
    return await api.put("/instances", json={"action": "delete", "id": [iid], **fields})


# ----------------------------------------------------------------------------- OAuth2


async def test_token_grants_and_refusals(sim: FakeCloudServer) -> None:
    creds = {"grant_type": "client_credentials", "client_id": verda_api.client_id(sim.tokens["verda"])}
    async with httpx.AsyncClient(base_url=base_url(sim)) as c:
        r = await c.post("/oauth2/token", json={**creds, "client_secret": "wrong"})
        assert _err(r)[:2] == (401, "unauthorized_request")
        r = await c.post("/oauth2/token", json={"grant_type": "password"})
        assert _err(r)[:2] == (400, "invalid_request")
        r = await c.get("/balance")
        assert _err(r)[:2] == (401, "unauthorized_request")
        r = await c.get("/balance", headers={"Authorization": "Bearer forged.abc"})
        assert _err(r)[:2] == (401, "unauthorized_request")
        first = await token(sim)
        assert set(first) >= {"access_token", "refresh_token", "expires_in", "token_type", "scope"}
        bearer = {"Authorization": f"Bearer {first['access_token']}"}
        assert (await c.get("/balance", headers=bearer)).json()["currency"] == "usd"
        # A refresh token is not an access token.
        r = await c.get("/balance", headers={"Authorization": f"Bearer {first['refresh_token']}"})
        assert r.status_code == 401

        verda_api.expire_tokens(sim.engine)
        r = await c.get("/balance", headers=bearer)
        assert _err(r) == (401, "unauthorized_request", "The access token has expired")
        r = await c.post("/oauth2/token", json={"grant_type": "refresh_token",
                                                "refresh_token": first["refresh_token"]})
        assert r.status_code == 200
        renewed = {"Authorization": f"Bearer {r.json()['access_token']}"}
        assert (await c.get("/balance", headers=renewed)).status_code == 200

        verda_api.expire_tokens(sim.engine, refresh=True)
        r = await c.post("/oauth2/token", json={"grant_type": "refresh_token",
                                                "refresh_token": first["refresh_token"]})
        assert _err(r)[:2] == (401, "unauthorized_request")
    assert verda_api.grants(sim.engine) == {"client_credentials": 1, "refresh_token": 1}


async def test_non_ascii_credentials_are_refused_as_401_not_500(sim: FakeCloudServer) -> None:
    """A client secret, refresh token or bearer signature with non-ASCII characters is a bad credential
    (401 unauthorized_request), as the API answers it — not a 500 from comparing str digests."""
    creds = {"grant_type": "client_credentials", "client_id": verda_api.client_id(sim.tokens["verda"])}
    async with httpx.AsyncClient(base_url=base_url(sim)) as c:
        r = await c.post("/oauth2/token", json={**creds, "client_secret": "sécret-FAKE"})
        assert _err(r)[:2] == (401, "unauthorized_request")
        r = await c.post("/oauth2/token", json={"grant_type": "refresh_token",
                                                "refresh_token": "e30.ünïcode"})
        assert _err(r)[:2] == (401, "unauthorized_request")
        access = (await token(sim))["access_token"]
        payload, _, sig = access.partition(".")
        forged = f"Bearer {payload}.{sig[:-1]}é".encode()  # a header's bytes: httpx sends str as ASCII
        r = await c.get("/balance", headers={"Authorization": forged})
        assert _err(r)[:2] == (401, "unauthorized_request")


async def test_token_lifetime_is_a_knob(sim: FakeCloudServer) -> None:
    verda_api.set_token_ttl(sim.engine, access_s=0.0)
    issued = await token(sim)
    assert issued["expires_in"] == 0.0
    async with httpx.AsyncClient(base_url=base_url(sim)) as c:
        r = await c.get("/balance", headers={"Authorization": f"Bearer {issued['access_token']}"})
    assert r.status_code == 401


# ----------------------------------------------------------------------------- catalogue


async def test_instance_types_and_availability(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    listed = (await api.get("/instance-types", params={"currency": "usd"})).json()
    types = {t["instance_type"]: t for t in listed}
    h100 = types["8H100.80S.176V"]
    assert h100["gpu"]["number_of_gpus"] == 8 and h100["gpu_memory"]["size_in_gigabytes"] == 640
    assert float(h100["spot_price"]) < float(h100["price_per_hour"])
    assert verda_catalog.CUDA_24 not in types["1V100.6V"]["supported_os"]
    sim.admin.set_stock("1H100.80S.30V", "FIN-02", 0)
    rows = (await api.get("/instance-availability", params={"isSpot": "false"})).json()
    avail = {r["location_code"]: r["availabilities"] for r in rows}
    assert set(avail) == {"FIN-01", "FIN-02", "FIN-03", "ICE-01"}
    assert "1H100.80S.30V" in avail["FIN-01"] and "1H100.80S.30V" not in avail["FIN-02"]
    ice = {"isSpot": "true", "location_code": "ICE-01"}
    one = (await api.get("/instance-availability", params=ice)).json()
    assert [r["location_code"] for r in one] == ["ICE-01"] and "1A100.40S.22V" in one[0]["availabilities"]
    v100 = "/instance-availability/1V100.6V"
    assert (await api.get(v100, params={"location_code": "FIN-01"})).json() is True
    assert (await api.get(v100, params={"location_code": "ICE-01"})).json() is False
    assert _err(await api.get("/instance-availability", params={"location_code": "MARS-1"}))[0] == 400
    assert _err(await api.get("/instance-availability", params={"isSpot": "yes"}))[0] == 400
    locations = (await api.get("/locations")).json()
    assert {"code": "ICE-01", "name": "Iceland 1 (Keflavik)", "country_code": "IS"} in locations


# ----------------------------------------------------------------------------- instances


async def test_create_boots_with_its_os_volume_and_startup_script(sim: FakeCloudServer,
                                                                    api: httpx.AsyncClient) -> None:
    # Like the SDK says: no address nor OS volume until provisioned. Read on an instance held
    # booting (a 0.2 s boot can be over before the first read on a busy box); provisioning,
    # it cannot be deleted: the sim fixture's next reset ends it.
    sim.admin.configure(hold_boots=True)
    slow = await _create(api, hostname="box-0", os_volume={"name": "os-box-0", "size": 60})
    first = (await api.get(f"/instances/{slow}")).json()
    assert first["status"] == "provisioning" and first["ip"] is None and first["os_volume_id"] is None
    sim.admin.configure(hold_boots=False)
    script = "#!/bin/sh\necho booted > \"$HOME/startup-ran\"\n"
    sid = (await api.post("/scripts", json={"name": "s", "script": script})).text
    iid = await _create(api, startup_script_id=sid, is_spot=True)
    inst = await _running(api, iid)
    assert ipaddress.ip_address(inst["ip"]).is_loopback and inst["ip"] != "127.0.0.1"
    assert inst["is_spot"] is True and inst["hostname"] == "box-1" and inst["location"] == "FIN-01"
    vol = (await api.get(f"/volumes/{inst['os_volume_id']}")).json()
    assert (vol["name"], vol["size"], vol["status"], vol["instance_id"]) == ("os-box-1", 60, "attached", iid)
    home = sim.engine.machine_home(sim.engine.machines[iid])
    await eventually(lambda: (home / "startup-ran").exists(), within=WITHIN,
                     what="the startup script to run at boot")


async def test_create_refusals(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    key = await _key(api)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"instance_type": "1X999"}, "Invalid instance type"),
        ({"location_code": "FIN-09"}, "Invalid location code"),
        ({"image": "windows-11"}, "Invalid image"),
        ({"instance_type": "1V100.6V"}, "Operating system is not valid for this instance type"),
        ({"ssh_key_ids": ["nope"]}, "Invalid ssh key id"),
        ({"startup_script_id": "nope"}, "Invalid startup script id"),
        ({"hostname": "under_score"}, "hostname must be"),
        ({"hostname": "h" * 61}, "hostname must be"),
    ]
    for fields, message in cases:
        status, code, text = _err(await api.post("/instances", json=_body(key, **fields)))
        assert (status, code) == (400, "invalid_request") and message in text, (fields, text)
    sim.admin.set_stock("1H100.80S.30V", "FIN-01", 0)
    status, code, text = _err(await api.post("/instances", json=_body(key)))
    assert (status, code) == (400, "invalid_request") and "capacity" in text
    sim.admin.add_fault("verda", "create", "quota")
    assert _err(await api.post("/instances", json=_body(key, location_code="FIN-02")))[:2] == \
        (402, "insufficient_funds")
    assert sim.admin.machines() == []


async def test_hostnames_are_not_unique(api: httpx.AsyncClient) -> None:
    a, b = await _create(api), await _create(api)
    assert a != b
    assert [i["hostname"] for i in (await api.get("/instances")).json()] == ["box-1", "box-1"]


async def test_delete_quirks(api: httpx.AsyncClient) -> None:
    iid = await _create(api)
    assert _err(await _delete(api, iid)) == (403, "forbidden_action", verda_api.PROVISIONING)
    inst = await _running(api, iid)  # the refusal left it be
    vol = inst["os_volume_id"]
    assert _err(await _delete(api, iid, volume_ids=["x"])) == (400, "invalid_request", "Invalid volume id")
    r = await _delete(api, iid, volume_ids=[vol], delete_permanently=True)
    assert r.status_code == 202
    assert (await api.get(f"/instances/{iid}")).json()["status"] == "discontinued"
    assert (await api.get("/instances")).json() == []
    assert _err(await _delete(api, iid)) == (403, "forbidden_action", verda_api.DISCONTINUED)
    assert _err(await _delete(api, "00000000-0000-0000-0000-000000000000")) == \
        (404, "not_found", verda_api.INVALID_ID)
    assert _err(await api.get("/instances/nope"))[2] == verda_api.INVALID_ID
    assert (await api.get(f"/volumes/{vol}")).status_code == 404
    assert (await api.get("/volumes/trash")).json() == []  # permanently: not even in the trash


async def test_os_volume_outlives_a_delete_that_does_not_name_it(api: httpx.AsyncClient) -> None:
    iid = await _create(api)
    vol = (await _running(api, iid))["os_volume_id"]
    other = await _create(api)
    other_vol = (await _running(api, other))["os_volume_id"]
    r = await api.request("DELETE", f"/volumes/{other_vol}", json={"is_permanent": True})
    assert _err(r)[:2] == (403, "forbidden_action")  # attached
    assert (await _delete(api, iid)).status_code == 202
    left = (await api.get(f"/volumes/{vol}")).json()
    assert (left["status"], left["instance_id"]) == ("detached", None)
    assert (await api.request("DELETE", f"/volumes/{vol}", json={})).status_code == 200
    assert [v["id"] for v in (await api.get("/volumes/trash")).json()] == [vol]  # not permanent: trash
    assert [v["id"] for v in (await api.get("/volumes")).json()] == [other_vol]


async def test_ssh_keys_and_scripts(api: httpx.AsyncClient) -> None:
    assert _err(await api.post("/sshkeys", json={"name": "bad", "key": "ssh-ed25519 nope"}))[:2] == \
        (400, "invalid_request")
    kid = await _key(api)
    assert (await api.get(f"/sshkeys/{kid}")).json() == [{"id": kid, "name": "mine", "key": PUBKEY}]
    sid = (await api.post("/scripts", json={"name": "s", "script": "#!/bin/sh\ntrue\n"})).text
    assert _err(await api.request("DELETE", "/scripts", json={"scripts": [sid, "nope"]}))[0] == 404
    assert (await api.request("DELETE", "/scripts", json={"scripts": [sid]})).status_code == 200
    assert (await api.get("/scripts")).json() == []
    assert (await api.delete(f"/sshkeys/{kid}")).status_code == 200
    assert _err(await api.delete(f"/sshkeys/{kid}"))[0] == 404


async def test_injected_faults_in_verda_format(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    sim.admin.add_fault("verda", "offers", "rate_limit", retry_after=2)
    r = await api.get("/instance-types")
    assert (r.status_code, r.headers["Retry-After"], r.json()["code"]) == (429, "2", "too_many_requests")
    sim.admin.add_fault("verda", "list", "server_error", status=503)
    assert _err(await api.get("/instances"))[:2] == (503, "service_unavailable")
    sim.admin.add_fault("verda", "create", "lose_response")
    r = await api.post("/instances", json=_body(await _key(api)))
    assert _err(r)[:2] == (504, "server_error")
    assert len((await api.get("/instances")).json()) == 1  # it took effect all the same
    # Verda documents no rate limits: none is enforced, even at real speed.
    sim.admin.configure(time_scale=1.0)
    for _ in range(30):
        assert (await api.get("/locations")).status_code == 200

"""The Verda adapter's mapping against the simulated Verda: OAuth2 refresh, offers per location and
country, the startup script, statuses and addresses, the delete-while-provisioning quirk, errors,
and side resources left without their instance."""

from __future__ import annotations

import base64
import re
import time
from typing import Any

import httpx
import pytest

from fakeclouds import verda_api, verda_catalog
from fakeclouds.machine_processes import tmp_of
from fakeclouds.server import FakeCloudServer
from providers import cloudinit
from providers import verda as verda_mod
from providers.base import (
    AuthError,
    CapacityError,
    InstanceRef,
    InstanceState,
    InvalidRequest,
    OfferQuery,
    QuotaError,
    Transient,
    Unsupported,
)
from providers.verda import VerdaProvider, startup_script
from tests.eventually import eventually, text_of
from tests.fakeclouds.helpers import WITHIN
from tests.verda.conftest import adapter, offer, spec, token


def _state(sim: FakeCloudServer) -> dict[str, Any]:
    return verda_api.state(sim.engine)


async def _wait(p: VerdaProvider, ref: InstanceRef, state: InstanceState) -> Any:
    async def check() -> Any:
        st = await p.get(ref)
        return st if st is not None and st.state == state else None
    return await eventually(check, within=WITHIN, what=f"{ref.instance_id} {state}")


# ----------------------------------------------------------------------------- OAuth2


async def test_expired_access_token_is_refreshed_with_the_refresh_token(sim: FakeCloudServer,
                                                                        verda: VerdaProvider) -> None:
    await verda.verify()
    assert verda_api.grants(sim.engine) == {"client_credentials": 1, "refresh_token": 0}
    verda_api.expire_tokens(sim.engine)  # the cloud now refuses the cached token with 401
    assert await verda.offers(OfferQuery())
    assert verda_api.grants(sim.engine) == {"client_credentials": 1, "refresh_token": 1}


async def test_token_refreshed_before_it_expires(sim: FakeCloudServer, verda: VerdaProvider) -> None:
    now = [1000.0]
    verda.clock = lambda: now[0]
    await verda.verify()
    now[0] += verda_api.ACCESS_TTL_S  # by our clock the token has expired: refreshed without a 401
    await verda.verify()
    assert verda_api.grants(sim.engine) == {"client_credentials": 1, "refresh_token": 1}
    assert verda._auth is not None and verda._auth.grants == {"client_credentials": 1, "refresh_token": 1}


async def test_expired_refresh_token_falls_back_to_client_credentials(sim: FakeCloudServer,
                                                                      verda: VerdaProvider) -> None:
    await verda.verify()
    verda_api.expire_tokens(sim.engine, access=True, refresh=True)
    await verda.verify()
    assert verda_api.grants(sim.engine) == {"client_credentials": 2, "refresh_token": 0}


async def test_bad_secret_is_auth_error_without_the_secret(sim: FakeCloudServer) -> None:
    async with adapter(sim, client_secret="s3cret-value") as p:
        with pytest.raises(AuthError) as exc:
            await p.verify()
    assert "s3cret-value" not in str(exc.value) and "Invalid client credentials" in str(exc.value)


# ----------------------------------------------------------------------------- offers


async def test_offers_by_location_country_and_market(sim: FakeCloudServer, verda: VerdaProvider) -> None:
    everything = await verda.offers(OfferQuery())
    assert {o.region for o in everything} == {"FIN-01", "FIN-02", "FIN-03", "ICE-01"}
    assert {o.region for o in await verda.offers(OfferQuery(region="FI"))} == {"FIN-01", "FIN-02", "FIN-03"}
    assert {o.region for o in await verda.offers(OfferQuery(region="IS"))} == {"ICE-01"}
    assert await verda.offers(OfferQuery(region="us-east-1")) == []
    eight = [o for o in everything if o.instance_type == "8H100.80S.176V" and not o.spot]
    assert [(o.gpu and (o.gpu.name, o.gpu.count, o.gpu.memory_gib), o.vcpus, o.region) for o in eight] == \
        [(("H100", 8, 80.0), 176, "FIN-03")]
    spot = await offer(verda, "1H100.80S.30V", "FIN-02", spot=True)
    on_demand = await offer(verda, "1H100.80S.30V", "FIN-02")
    assert spot.spot and spot.price_per_hour == pytest.approx(2.19 * 0.35, abs=1e-4)
    assert on_demand.price_per_hour == pytest.approx(2.19)
    cpu = [o for o in everything if o.instance_type == "CPU.4V.16G"]
    assert cpu and all(o.gpu is None for o in cpu)
    sim.admin.set_stock("1H100.80S.30V", "FIN-02", 0)
    left = await verda.offers(OfferQuery(region="FIN-02"))
    assert not [o for o in left if o.instance_type == "1H100.80S.30V"]


# ----------------------------------------------------------------------------- create


async def test_create_sends_ownership_k3s_script_and_os_volume(sim: FakeCloudServer,
                                                               verda: VerdaProvider) -> None:
    user = "#!/bin/bash\necho \"it's $((1+1))\" > \"$HOME/user-ran\"; `true` $(false) 'x'\n"
    s = spec(verda, k3s=True, user_data=user)
    ref = await verda.create(await offer(verda, location="ICE-01", instance_type="1A100.40S.22V"), s)
    m = sim.engine.machines[ref.instance_id]
    name = f"gpuprov-{verda.installation_id}-{s.key}"
    assert (m.name, m.extra["description"], m.region, m.spot) == (name, name, "ICE-01", False)
    assert m.extra["image"] == verda_mod.DEFAULT_IMAGE == verda_catalog.CUDA_24
    [script] = [x for x in _state(sim)["scripts"].values() if x["name"] == name]
    assert m.extra["startup_script_id"] == script["id"]
    assert "get.k3s.io" in script["script"] and f"# gpuprov-key: {s.key}" in script["script"]
    [vol] = [v for v in _state(sim)["volumes"].values() if v["instance_id"] == m.id]
    assert (vol["name"], vol["on_spot_discontinue"]) == (name, "delete_permanently")
    st = await _wait(verda, ref, InstanceState.RUNNING)
    home = sim.engine.machine_home(m)
    await eventually(lambda: text_of(home / "user-ran"), until=lambda text: text == "it's 2\n",
                     within=WITHIN, what="the caller's script to run at boot")
    # Decoded into the machine's own /tmp to run, and removed once it ran.
    await eventually(lambda: list(tmp_of(home).iterdir()), until=lambda left: left == [], within=WITHIN,
                     what="the decoded script removed after it ran")
    assert (st.ssh_port, st.ssh_user, st.host) == (22, "root", m.address)
    # The shared SSH key object is made once per installation and public key.
    again = await verda.create(await offer(verda), spec(verda))
    assert len(_state(sim)["ssh_keys"]) == 1
    await verda.terminate(again)


def test_startup_script_never_runs_the_callers_text_as_its_own() -> None:
    user = "#!/bin/sh\nGPUPROV_USER_DATA\n'\"$(reboot)\"'\n"
    script = startup_script("k-1", k3s=False, user_data=user)
    assert "reboot" not in script and cloudinit.K3S_AT_BOOT.splitlines()[2] not in script
    encoded = re.search(r"<<'GPUPROV_USER_DATA'\n(.*?)\nGPUPROV_USER_DATA\n", script, re.S)
    assert encoded and base64.b64decode(encoded.group(1)).decode() == user
    with pytest.raises(Unsupported):
        startup_script("k-1", k3s=True, user_data="#cloud-config\nruncmd: [ls]\n")


async def test_old_gpu_gets_an_image_it_supports(sim: FakeCloudServer, verda: VerdaProvider) -> None:
    ref = await verda.create(await offer(verda, "1V100.6V"), spec(verda))
    assert sim.engine.machines[ref.instance_id].extra["image"] == verda_catalog.CUDA_22
    await verda.terminate(ref)


async def test_spot_offer_launches_spot(sim: FakeCloudServer, verda: VerdaProvider) -> None:
    ref = await verda.create(await offer(verda, spot=True), spec(verda))
    m = sim.engine.machines[ref.instance_id]
    assert m.spot and m.extra["contract"] == "SPOT"
    assert m.price_per_hour == pytest.approx(2.19 * 0.35, abs=1e-4)
    await verda.terminate(ref)


async def test_long_key_is_shortened_and_found_again(sim: FakeCloudServer, verda: VerdaProvider) -> None:
    key = "gp-" + "a" * 50 + "-a1"
    ref = await verda.create(await offer(verda), spec(verda, key))
    m = sim.engine.machines[ref.instance_id]
    assert m.name is not None and len(m.name) == 60 and m.name != f"gpuprov-{verda.installation_id}-{key}"
    assert [r.key for r in await verda.list_owned()] == [key]
    found = await verda.find(key)
    assert found is not None and (found.instance_id, found.key) == (ref.instance_id, key)
    await verda.terminate(ref)
    await _wait(verda, ref, InstanceState.TERMINATED)
    await verda.release(key)
    assert verda_api.side_resources(sim.engine) == [r for r in verda_api.side_resources(sim.engine)
                                                    if r["kind"] == "ssh-key"]


# ----------------------------------------------------------------------------- errors


async def test_create_errors_map_to_the_taxonomy(sim: FakeCloudServer, verda: VerdaProvider) -> None:
    o = await offer(verda, location="FIN-03")
    sim.admin.set_stock("1H100.80S.30V", "FIN-03", 0)
    with pytest.raises(CapacityError) as cap:
        await verda.create(o, spec(verda))
    assert (cap.value.scope.region, cap.value.scope.instance_type) == ("FIN-03", "1H100.80S.30V")
    sim.admin.add_fault("verda", "create", "quota")
    with pytest.raises(QuotaError) as quota:
        await verda.create(await offer(verda), spec(verda))
    assert (quota.value.scope.region, quota.value.scope.instance_type) == (None, None)  # the balance
    with pytest.raises(InvalidRequest, match="Invalid image"):
        await verda.create(await offer(verda), spec(verda, image="windows-11"))
    # Definite refusals leave no startup script behind.
    assert _state(sim)["scripts"] == {}
    assert sim.admin.machines() == []


async def test_lost_create_answer_then_retry_finds_the_instance(sim: FakeCloudServer,
                                                                 verda: VerdaProvider) -> None:
    s = spec(verda, k3s=True)
    sim.admin.add_fault("verda", "create", "lose_response")
    with pytest.raises(Transient) as lost:
        await verda.create(await offer(verda), s)
    assert lost.value.in_doubt
    ref = await verda.create(await offer(verda), s)
    assert [m["id"] for m in sim.admin.machines()] == [ref.instance_id]
    assert len(_state(sim)["scripts"]) == 1  # the retry reused the script
    await verda.terminate(ref)


# ----------------------------------------------------------------------------- status and terminate


async def test_statuses(sim: FakeCloudServer, verda: VerdaProvider) -> None:
    # Booting: read on an instance held booting (a 0.2 s boot can be over before the
    # first read on a busy box); provisioning, it cannot be deleted: the sim fixture's next reset ends it.
    sim.admin.configure(hold_boots=True)
    slow = await verda.create(await offer(verda), spec(verda))
    first = await verda.get(slow)
    assert first is not None and (first.state, first.detail, first.host) == (InstanceState.PENDING,
                                                                            "provisioning", None)
    sim.admin.configure(hold_boots=False)
    ref = await verda.create(await offer(verda), spec(verda))
    await _wait(verda, ref, InstanceState.RUNNING)
    sim.admin.kill(ref.instance_id)
    dead = await _wait(verda, ref, InstanceState.ERROR)
    assert dead.detail == "error"
    await verda.terminate(ref)  # an instance in error can be deleted
    gone = await verda.get(ref)
    assert gone is not None and (gone.state, gone.detail) == (InstanceState.TERMINATED, "discontinued")
    assert await verda.get(ref.model_copy(update={"instance_id": "no-such-id"})) is None


async def test_terminate_waits_out_provisioning_and_removes_volume_and_script(sim: FakeCloudServer,
                                                                              verda: VerdaProvider) -> None:
    sim.admin.configure(boot_delay=0.6)
    s = spec(verda, k3s=True)
    ref = await verda.create(await offer(verda), s)
    started = time.monotonic()
    await verda.terminate(ref)  # refused while provisioning: waited for, then deleted
    assert time.monotonic() - started < verda_mod.PROVISIONING_WAIT_S
    st = await verda.get(ref)
    assert st is not None and st.state == InstanceState.TERMINATED
    assert _state(sim)["volumes"] == {} and _state(sim)["trash"] == {} and _state(sim)["scripts"] == {}
    await verda.terminate(ref)  # "Can't discontinue a discontinued instance": already gone
    assert await verda.list_owned() == []


async def test_terminate_of_an_instance_that_never_comes_up_is_transient(
        sim: FakeCloudServer, verda: VerdaProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verda_mod, "PROVISIONING_WAIT_S", 0.3)
    sim.admin.add_fault("verda", "create", "stuck_booting")
    ref = await verda.create(await offer(verda), spec(verda))
    with pytest.raises(Transient, match="still provisioning"):
        await verda.terminate(ref)
    st = await verda.get(ref)
    assert st is not None and st.state == InstanceState.PENDING  # untouched; the workflow retries


async def test_leftover_volume_is_listed_and_released(sim: FakeCloudServer, verda: VerdaProvider) -> None:
    s = spec(verda)
    ref = await verda.create(await offer(verda), s)
    await _wait(verda, ref, InstanceState.RUNNING)
    # Someone deletes the instance by hand without its volume: the OS volume stays, detached.
    access = (await token(sim))["access_token"]
    async with httpx.AsyncClient(base_url=verda.endpoint, headers={"Authorization": f"Bearer {access}"}) as c:
        r = await c.put("/instances", json={"action": "delete", "id": [ref.instance_id]})
        assert r.status_code == 202
    owned = await verda.list_owned()
    assert sorted((r.kind, r.key) for r in owned) == [("startup-script", s.key), ("volume", s.key)]
    assert await verda.find_all(s.key) == []
    await verda.release(s.key)
    assert await verda.list_owned() == []
    assert _state(sim)["volumes"] == {} and _state(sim)["trash"] == {}
    await verda.release(s.key)  # nothing left: success

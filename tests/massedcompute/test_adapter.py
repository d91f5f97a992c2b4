"""The Massed Compute adapter's mapping, against the simulated API (and, for answer shapes the
simulation does not produce, a small hand-written fake transport)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds.server import FakeCloudServer
from providers.account_objects import key_object_name
from providers.base import (
    AuthError,
    CapacityError,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    Offer,
    OfferQuery,
    QuotaError,
    RateLimited,
    Transient,
    Unsupported,
)
from providers.massedcompute import (
    MassedComputeProvider,
    authorized_keys_command,
    instance_name,
)
from tests.eventually import eventually
from tests.massedcompute.conftest import (
    NAME,
    PUBKEY,
    WITHIN,
    adapter,
    add_key,
    instance,
    spec,
    ssh_run,
)


async def offer(p: MassedComputeProvider, product: str = "gpu_1x_a6000",
                region: str = "us-central-1") -> Offer:
    found = [o for o in await p.offers(OfferQuery(region=region)) if o.instance_type == product]
    assert len(found) == 1, found
    return found[0]


async def wait_state(p: MassedComputeProvider, ref: InstanceRef, state: InstanceState) -> InstanceStatus:
    st = await eventually(lambda: p.get(ref), until=lambda st: st and st.state == state, within=WITHIN,
                          what=f"{ref.instance_id} {state}")
    assert st is not None
    return st


async def test_offers_from_the_inventory(sim: FakeCloudServer, mc: MassedComputeProvider) -> None:
    sim.admin.set_stock("gpu_1x_l40", "us-central-3", 0, facade=NAME)
    offers = await mc.offers(OfferQuery())
    l40 = [o for o in offers if o.instance_type == "gpu_1x_l40"]
    assert [(o.region, o.price_per_hour, o.vcpus, o.memory_gib) for o in l40] == [
        ("us-central-1", 0.99, 16, 64.0)]
    gpu = l40[0].gpu
    assert gpu is not None and (gpu.name, gpu.count, gpu.memory_gib) == ("L40", 1, 48.0)
    two = next(o for o in offers if o.instance_type == "gpu_2x_a6000")
    assert two.gpu is not None and (two.gpu.name, two.gpu.count) == ("A6000", 2)
    a6000 = await mc.offers(OfferQuery(gpu="RTX A6000"))
    assert {o.instance_type for o in a6000} == {"gpu_1x_a6000", "gpu_2x_a6000"}
    assert await mc.offers(OfferQuery(spot=True)) == []
    assert [o.price_per_hour for o in offers] == sorted(o.price_per_hour for o in offers)


async def test_create_registers_one_shared_key_object_and_the_default_image(
        sim: FakeCloudServer, api: httpx.AsyncClient, mc: MassedComputeProvider) -> None:
    o = await offer(mc)
    first = await mc.create(o, spec(mc))
    second = await mc.create(o, spec(mc))
    keys = (await api.get("/ssh-keys")).json()["sshKeys"]
    assert [k["name"] for k in keys] == [key_object_name(mc.installation_id, PUBKEY)]  # one, shared
    for ref in (first, second):
        inst = await instance(api, ref.instance_id)
        assert inst["image"]["name"] == "Ubuntu 22.04 Desktop (Base)"
        assert inst["name"] == instance_name(mc.installation_id, ref.key)
        assert (inst["product_name"], inst["region_name"]) == ("gpu_1x_a6000", "us-central-1")
    assert [m["extra"]["ssh_keys"] for m in sim.admin.machines()] == [[keys[0]["name"]]] * 2


async def test_a_key_the_account_already_holds_is_reused(api: httpx.AsyncClient,
                                                         mc: MassedComputeProvider) -> None:
    await add_key(api, "my laptop")
    await mc.create(await offer(mc), spec(mc))
    assert [k["name"] for k in (await api.get("/ssh-keys")).json()["sshKeys"]] == ["my laptop"]


async def test_image_by_id_or_name(sim: FakeCloudServer, api: httpx.AsyncClient,
                                   mc: MassedComputeProvider) -> None:
    o = await offer(mc)
    for wanted, image_id in (("LLM", 9), ("art", 7), ("4", 4)):
        ref = await mc.create(o, spec(mc, image=wanted))
        assert (await instance(api, ref.instance_id))["image"]["id"] == image_id
    before = len(sim.admin.machines())
    with pytest.raises(InvalidRequest, match="no image 'Windows'"):
        await mc.create(o, spec(mc, image="Windows"))
    assert len(sim.admin.machines()) == before


async def test_statuses_address_user_and_no_password(sim: FakeCloudServer, api: httpx.AsyncClient,
                                                     mc: MassedComputeProvider) -> None:
    # Booting: read on a VM held booting (a 0.2 s boot can be over before the first
    # read on a busy box), gone before the one that boots.
    sim.admin.configure(hold_boots=True)
    slow = await mc.create(await offer(mc), spec(mc))
    booting = await mc.get(slow)
    assert booting is not None and booting.state == InstanceState.PENDING and booting.host is None
    assert booting.detail == "rented"  # rented, but os_booted is still 0
    await mc.terminate(slow)
    await eventually(lambda: mc.get(slow), until=lambda st: st is None, within=WITHIN,
                     what=f"{slow.instance_id} gone")
    sim.admin.configure(hold_boots=False)
    ref = await mc.create(await offer(mc), spec(mc))
    up = await wait_state(mc, ref, InstanceState.RUNNING)
    assert (up.ssh_port, up.ssh_user, up.instance_type) == (22, "Ubuntu", "gpu_1x_a6000")
    assert up.host == (await instance(api, ref.instance_id))["ip"]
    assert (await ssh_run(str(up.host), "echo ok")).strip() == "ok"  # host:22 as the API's user, our key

    password = (await instance(api, ref.instance_id))["password"]
    assert password
    seen = [up, *(await mc.list_owned()), await mc.find(ref.key)]
    assert all(password not in x.model_dump_json() for x in seen if x is not None)

    sim.admin.kill(ref.instance_id)
    dead = await mc.get(ref)
    assert dead is not None and (dead.state, dead.detail, dead.host) == (InstanceState.ERROR, "error", None)
    await mc.terminate(ref)
    terminating = await mc.get(ref)
    assert terminating is None or terminating.state == InstanceState.TERMINATING
    await eventually(lambda: mc.get(ref), until=lambda st: st is None, within=WITHIN,
                     what=f"{ref.instance_id} gone")
    await mc.terminate(ref)  # gone: success
    assert await mc.find(ref.key) is None and await mc.list_owned() == []


async def test_extra_keys_reach_authorized_keys_without_a_shell(sim: FakeCloudServer, api: httpx.AsyncClient,
                                                                 mc: MassedComputeProvider) -> None:
    # A user's key whose comment is shell syntax: it must arrive as text, never run.
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()
    hostile = f"{other[0]} {other[1]} it's $(touch pwned); `touch pwned2` \"x\" && rm -rf ~"
    ref = await mc.create(await offer(mc), spec(mc, keys=[PUBKEY, hostile]))
    inst = await instance(api, ref.instance_id)
    assert "touch pwned" in inst["command_startup"]  # the startup command carries it, quoted
    up = await wait_state(mc, ref, InstanceState.RUNNING)
    keys = await eventually(lambda: ssh_run(str(up.host), "cat .ssh/authorized_keys 2>/dev/null"),
                            until=lambda keys: "ed25519" in keys, within=WITHIN,
                            what="the startup command to write authorized_keys")
    assert keys.splitlines() == [hostile]
    assert (await ssh_run(str(up.host), "ls pwned pwned2 2>&1 >/dev/null | wc -l")).strip() == "2"


def test_authorized_keys_command_is_idempotent_and_inert(tmp_path: Path) -> None:
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    weird = f"{other} a'b;$(touch {tmp_path}/pwned)"
    command = authorized_keys_command([PUBKEY, weird], "no-such-user-here")
    assert command is not None and authorized_keys_command([], "Ubuntu") is None
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for _ in range(2):  # a second boot adds nothing
        subprocess.run(["bash", "-c", command], env=env, check=True, timeout=10)
    assert (tmp_path / ".ssh" / "authorized_keys").read_text().splitlines() == [PUBKEY, weird]
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(InvalidRequest):
        authorized_keys_command(["ssh-ed25519 AAAA\nrm -rf /"], "Ubuntu")


async def test_refusals_map_onto_the_taxonomy(sim: FakeCloudServer, mc: MassedComputeProvider) -> None:
    o = await offer(mc)
    sim.admin.set_stock("gpu_1x_a6000", "us-central-1", 0, facade=NAME)
    with pytest.raises(CapacityError) as cap:
        await mc.create(o, spec(mc))
    assert (cap.value.scope.region, cap.value.scope.instance_type) == ("us-central-1", "gpu_1x_a6000")
    sim.admin.set_stock("gpu_1x_a6000", "us-central-1", 3, facade=NAME)

    sim.engine.facade_state[NAME]["billing_configured"] = False
    with pytest.raises(QuotaError, match="billing") as billing:
        await mc.create(o, spec(mc))
    assert (billing.value.scope.region, billing.value.scope.instance_type) == (None, None)  # the whole cloud
    sim.engine.facade_state[NAME]["billing_configured"] = True
    sim.admin.configure(quota={NAME: 0})
    with pytest.raises(QuotaError) as quota:
        await mc.create(o, spec(mc))
    assert quota.value.scope.region is None

    sim.admin.add_fault(NAME, "list", "rate_limit", retry_after=2)
    with pytest.raises(RateLimited) as limited:
        await mc.list_owned()
    assert limited.value.retry_after == pytest.approx(2.0)
    with pytest.raises(Unsupported, match="^Massed Compute has no firewall API$"):
        await mc.create(o, spec(mc, ports=[8080]))
    with pytest.raises(InvalidRequest, match="startup command"):
        await mc.create(o, spec(mc, user_data="#cloud-config\n{}"))
    async with adapter(sim, token="wrong") as bad:
        with pytest.raises(AuthError):
            await bad.verify()
    assert sim.admin.machines() == []


async def test_lost_launch_answer_is_found_by_name(sim: FakeCloudServer, mc: MassedComputeProvider) -> None:
    o, s = await offer(mc), spec(mc)
    sim.admin.add_fault(NAME, "create", "lose_response")
    with pytest.raises(Transient) as lost:
        await mc.create(o, s)
    assert lost.value.in_doubt
    again = await mc.create(o, s)
    assert [m["id"] for m in sim.admin.machines()] == [again.instance_id]
    assert [r.instance_id for r in await mc.find_all(s.key)] == [again.instance_id]


# --------------------------------------------------------------------------- answer shapes the simulation
# does not produce: a FAKE transport (hand-written, not Massed's API) answering only what each test needs.


def _fake(routes: dict[tuple[str, str], tuple[int, Any]]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        status, body = routes[(request.method, request.url.path.removeprefix("/api/v1"))]
        return httpx.Response(status, json=body(request) if callable(body) else body)
    return httpx.MockTransport(handle)


def _faked(routes: dict[tuple[str, str], tuple[int, Any]]) -> MassedComputeProvider:
    p = adapter_without_server()
    p._transport = _fake(routes)
    return p


def adapter_without_server() -> MassedComputeProvider:
    creds = MassedComputeProvider.parse_credentials({"api_key": "k"})
    return MassedComputeProvider(creds, installation_id="abcd1234")


_OFFER = Offer(provider=NAME, instance_type="gpu_1x_l40", vcpus=16, memory_gib=64, region="us-central-3",
               price_per_hour=0.99)
_IMAGES: tuple[int, Any] = (200, {"images": [{"id": 3, "name": "Ubuntu Server 22.04"}]})
_KEYS: tuple[int, Any] = (200, {"sshKeys": []})


async def test_capacity_read_from_words_when_the_code_is_unknown() -> None:
    p = _faked({("GET", "/instance"): (200, {"runningInstances": []}), ("GET", "/images"): _IMAGES,
                ("GET", "/ssh-keys"): _KEYS, ("POST", "/ssh-keys"): (200, {}),
                ("POST", "/instance/launch"): (409, {"message": "No capacity available for gpu_1x_l40"})})
    async with p:
        with pytest.raises(CapacityError) as cap:
            await p.create(_OFFER, spec(p))
    assert cap.value.scope.region == "us-central-3"


async def test_launch_answer_without_a_uuid_falls_back_on_the_name() -> None:
    launched: list[dict[str, Any]] = []

    def listing(_: httpx.Request) -> dict[str, Any]:
        return {"runningInstances": launched}

    def launch(request: httpx.Request) -> dict[str, Any]:
        body = json.loads(request.content)
        assert body["imageId"] == 3 and body["regionName"] == "us-central-3" and "command" not in body
        launched.append({"uuid": "u-1", "name": body["instanceName"], "status": "rented", "os_booted": 0,
                         "password": "hunter2"})
        return {"message": "ok"}

    p = _faked({("GET", "/instance"): (200, listing), ("GET", "/images"): _IMAGES,
                ("GET", "/ssh-keys"): _KEYS, ("POST", "/ssh-keys"): (200, {}),
                ("POST", "/instance/launch"): (200, launch)})
    async with p:
        ref = await p.create(_OFFER, spec(p))
        assert ref.instance_id == "u-1"
        assert "hunter2" not in str([r.model_dump() for r in await p.list_owned()])


async def test_unknown_statuses_and_junk_fields() -> None:
    inst = {"uuid": "u-2", "name": "x", "ip": "not an ip\x1b[2J", "username": "root; rm -rf /",
            "status": "Weird\n", "os_booted": 1, "password": "hunter2"}
    p = _faked({("GET", "/instance/u-2"): (200, {"runningInstance": inst})})
    async with p:
        st = await p.get(InstanceRef(provider=NAME, instance_id="u-2", key="k"))
    assert st is not None
    assert (st.state, st.detail, st.host, st.ssh_user) == (InstanceState.ERROR, "weird", None, "Ubuntu")
    assert "hunter2" not in st.model_dump_json()


async def test_a_key_registered_by_a_concurrent_create_is_adopted() -> None:
    """The conflict path of "ensure the account key exists" (providers/account_objects.py): the first
    look finds no key, the registration is refused because a racing create just made it, and the
    second look adopts that one instead of failing the create."""
    theirs = {"name": key_object_name("abcd1234", PUBKEY), "publicKey": PUBKEY}
    registered: list[dict[str, Any]] = []
    posts: list[dict[str, Any]] = []

    def keys(_: httpx.Request) -> dict[str, Any]:
        return {"sshKeys": registered}

    def register(request: httpx.Request) -> dict[str, Any]:
        posts.append(json.loads(request.content))
        registered.append(theirs)  # the racing create's registration landed first
        return {"message": "an SSH key with this name already exists"}

    p = _faked({("GET", "/ssh-keys"): (200, keys), ("POST", "/ssh-keys"): (400, register)})
    async with p:
        assert await p._ensure_key_object(PUBKEY) == theirs["name"]
        assert len(posts) == 1
        assert await p._ensure_key_object(PUBKEY) == theirs["name"] and len(posts) == 1  # found first now


async def test_a_refused_key_registration_with_no_key_behind_it_stands() -> None:
    p = _faked({("GET", "/ssh-keys"): _KEYS, ("POST", "/ssh-keys"): (400, {"message": "invalid key"})})
    async with p:
        with pytest.raises(InvalidRequest):
            await p._ensure_key_object(PUBKEY)

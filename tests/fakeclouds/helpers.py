from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx

from tests.eventually import eventually as poll

if TYPE_CHECKING:
    from fakeclouds.engine import Engine

# Waits are on conditions; the deadline only bounds a failure, so it is generous (busy 2-core CI).
WITHIN = 30.0


async def eventually(check: Callable[[], Any], what: str, within: float = WITHIN) -> Any:
    """Poll `check` (sync or async) until it returns something truthy; return that."""
    return await poll(check, within=within, what=what)


async def create_local(client: httpx.AsyncClient, pubkey: str, name: str = "m1",
                       **fields: Any) -> httpx.Response:
    body = {"name": name, "instance_type": "cpu-small", "region": "local-1", "ssh_public_keys": [pubkey],
            **fields}
    return await client.post("/machines", json=body)


async def wait_local(client: httpx.AsyncClient, machine_id: str, status: str = "running",
                     within: float = WITHIN) -> dict[str, Any]:
    async def machine() -> dict[str, Any]:
        m: dict[str, Any] = (await client.get(f"/machines/{machine_id}")).json()
        return m

    return await poll(machine, until=lambda m: m.get("status") == status, within=within,
                      what=f"machine {machine_id} {status}")


async def wait_gone(client: httpx.AsyncClient, path: str, within: float = WITHIN) -> None:
    """Poll `path` until it answers 404."""
    async def status() -> int:
        return (await client.get(path)).status_code

    await poll(status, until=lambda code: code == 404, within=within, what=f"{path} to answer 404")


async def lambda_key(client: httpx.AsyncClient, pubkey: str, name: str = "k1") -> None:
    keys = (await client.get("/ssh-keys")).json()["data"]
    if not any(k["name"] == name for k in keys):
        r = await client.post("/ssh-keys", json={"name": name, "public_key": pubkey})
        assert r.status_code == 200, r.text


async def launch_lambda(client: httpx.AsyncClient, pubkey: str, **fields: Any) -> httpx.Response:
    await lambda_key(client, pubkey)
    body = {"region_name": "us-east-1", "instance_type_name": "gpu_1x_a10", "ssh_key_names": ["k1"],
            "name": "job", **fields}
    return await client.post("/instance-operations/launch", json=body)


async def wait_lambda(client: httpx.AsyncClient, instance_id: str, status: str = "active",
                      within: float = WITHIN) -> dict[str, Any]:
    async def instance() -> dict[str, Any]:
        body: dict[str, Any] = (await client.get(f"/instances/{instance_id}")).json()
        return body

    body = await poll(instance, until=lambda b: b.get("data", {}).get("status") == status, within=within,
                      what=f"instance {instance_id} {status}")
    inst: dict[str, Any] = body["data"]
    return inst


async def wait_engine(engine: Engine, machine_id: str, status: str) -> None:
    """Wait for a machine of an engine running on this test's loop to reach `status`."""
    await poll(lambda: engine.machines[machine_id].status == status, within=WITHIN,
               what=f"{machine_id} to be {status}")
